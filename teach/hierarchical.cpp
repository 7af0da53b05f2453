#include "teach/hierarchical.h"

#include <cstdio>

#include "common/error.h"
#include "experiments/cost_model.h"

namespace gradsync::teach {
namespace {

std::string megabytes(double mb) {
  if (mb < 0) return "-";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", mb);
  return buffer;
}

}  // namespace

std::vector<HierarchicalRow> hierarchical_rows(const std::vector<Config>& configs,
                                               const std::vector<RunOutcome>& runs) {
  GRADSYNC_CHECK(configs.size() == runs.size(), "one configuration per run");
  std::vector<HierarchicalRow> rows;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const Config& c = configs[i];
    const RunSummary& s = runs[i].summary;
    if (c.strategy != "allreduce" || c.network.hosts <= 0) continue;
    HierarchicalRow row;
    row.run = c.name;
    row.backend = s.backend;
    row.hosts = c.network.hosts;
    // Ranks in blocks of workers / hosts, rounded up (launch/namespace_network.h).
    row.ranks_per_host = (c.workers + row.hosts - 1) / row.hosts;
    // The hierarchical communicator names both its levels ("shm+tcp").
    row.hierarchical = s.backend.find('+') != std::string::npos;
    const double model_bytes = 4.0 * static_cast<double>(s.parameters);
    const cost::HostBytes predicted =
        row.hierarchical ? cost::hierarchical_host_bytes(row.hosts, row.ranks_per_host, model_bytes)
                         : cost::flat_ring_host_bytes(row.hosts, row.ranks_per_host, model_bytes);
    row.predicted_inter_mb = predicted.inter_host / 1e6;
    row.predicted_intra_mb = predicted.intra_host / 1e6;
    row.measured_inter_mb = s.link_bytes_per_step ? *s.link_bytes_per_step / 1e6 : -1;
    row.step_ms = (s.mean_step.compute_s + s.mean_step.communicate_s + s.mean_step.wait_s) * 1e3;
    rows.push_back(row);
  }
  return rows;
}

std::string render_hierarchical(const std::vector<HierarchicalRow>& rows) {
  std::string out =
      "| run | hosts x ranks | all-reduce | between hosts MB/step: measured | model | "
      "within hosts MB/step: model | step ms |\n|---|---|---|---:|---:|---:|---:|\n";
  for (const HierarchicalRow& r : rows) {
    out += "| " + r.run + " | " + std::to_string(r.hosts) + " x " +
           std::to_string(r.ranks_per_host) + " | " +
           (r.hierarchical ? "hierarchical (" : "flat (") + r.backend + ") | " +
           megabytes(r.measured_inter_mb) + " | " + megabytes(r.predicted_inter_mb) + " | " +
           megabytes(r.predicted_intra_mb) + " | " + megabytes(r.step_ms) + " |\n";
  }
  out +=
      "\nModel (S = model bytes, H hosts of L ranks, N = H L; bytes sent, all ranks together):\n"
      "  flat          every rank sends 2(N-1)/N S to its right neighbour, and H of those\n"
      "                neighbours are on the next host: H 2(N-1)/N S cross hosts.\n"
      "  hierarchical  an all-reduce within each host over shared memory, then a ring of the H\n"
      "                leaders, 2(H-1) S across hosts, then each leader's broadcast at home.\n"
      "Measured is what the kernel counted on the hosts' veths: TCP/IP headers, acknowledgements\n"
      "and the rendezvous ride on top of the model's payload. Both give every rank the same sum,\n"
      "so both train identically: only where the bytes go differs.\n";
  return out;
}

}  // namespace gradsync::teach
