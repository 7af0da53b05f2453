#include "teach/zero_lesson.h"

#include <cstdio>

#include "common/error.h"
#include "experiments/cost_model.h"

namespace gradsync::teach {
namespace {

std::string cell(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, value < 100 ? "%.2f" : "%.1f", value);
  return buffer;
}

// The MLP's layers' parameter counts (what the layer storage gathers and reduces), from the
// run's hidden widths, classes and parameter count, the input width following from them;
// empty where they do not fit (another model kind): the cost model then takes the model as one
// layer, an upper bound.
std::vector<double> mlp_layers(const Config& c, double params) {
  const std::vector<int>& hidden = c.model.hidden;
  if (c.model.kind != "mlp" || hidden.empty()) return {};
  std::vector<double> widths(hidden.begin(), hidden.end());
  widths.push_back(c.data.classes);
  double rest = 0;
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) rest += widths[l] * widths[l + 1] + widths[l + 1];
  const double input = (params - rest - widths.front()) / widths.front();
  if (input < 1 || input != static_cast<double>(static_cast<long long>(input))) return {};
  std::vector<double> layers = {input * widths.front() + widths.front()};
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
    layers.push_back(widths[l] * widths[l + 1] + widths[l + 1]);
  }
  return layers;
}

}  // namespace

std::vector<ZeroRow> zero_rows(const std::vector<Config>& configs,
                               const std::vector<RunOutcome>& runs) {
  GRADSYNC_CHECK(configs.size() == runs.size(), "one configuration per run");
  std::vector<ZeroRow> rows;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const Config& c = configs[i];
    const RunSummary& s = runs[i].summary;
    if (!uses_communicator(c.strategy)) continue;
    ZeroRow row;
    row.run = c.name;
    row.stage = c.strategy == "zero" ? c.zero.stage : 0;
    row.workers = c.workers;
    const double p = static_cast<double>(s.parameters);
    row.measured_mb = static_cast<double>(s.peak_model_state_bytes) / 1e6;
    row.gradsync_mb =
        cost::zero_gradsync_bytes(row.stage, row.workers, p, mlp_layers(c, p)).total() / 1e6;
    row.paper_mb = cost::zero_paper_bytes(row.stage, row.workers, p).total() / 1e6;
    // The busiest rank's bytes, sent and received, over the run: half of it sent, per step.
    row.sent_mb =
        s.steps > 0 ? static_cast<double>(s.busiest_bytes) / 2 / static_cast<double>(s.steps) / 1e6
                    : 0;
    row.model_sent_mb = cost::zero_step_bytes(row.stage, row.workers, p) / 1e6;
    row.step_ms = (s.mean_step.compute_s + s.mean_step.communicate_s + s.mean_step.wait_s) * 1e3;
    rows.push_back(row);
  }
  return rows;
}

std::string render_zero(const std::vector<ZeroRow>& rows) {
  std::string out =
      "| run | stage | N | model state MB/rank: measured | model (this build) | paper's stage | "
      "sent MB/step/rank: measured | model | step ms |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const ZeroRow& r : rows) {
    out += "| " + r.run + " | " +
           (r.stage == 0 ? std::string("0 (allreduce)") : std::to_string(r.stage)) + " | " +
           std::to_string(r.workers) + " | " + cell(r.measured_mb) + " | " + cell(r.gradsync_mb) +
           " | " + cell(r.paper_mb) + " | " + cell(r.sent_mb) + " | " + cell(r.model_sent_mb) +
           " | " + cell(r.step_ms) + " |\n";
  }
  out +=
      "\nModel (P parameters, fp32 SGD with momentum, N ranks; per rank):\n"
      "  allreduce  parameters 4P + gradients 4P + momentum 4P\n"
      "  stage 1    momentum sharded: 4P/N (this build also keeps shards of the parameters and\n"
      "             gradients beside the model's full buffers: + 8P/N)\n"
      "  stage 2    gradients sharded too, each layer's freed once reduced: the model's full\n"
      "             parameters, the shards, and two layer gradients (computed, in flight)\n"
      "  stage 3    parameters sharded too: the shards, 12P/N, and a window of layers, two\n"
      "             gathered (the running one, the prefetched next) and two layer gradients\n"
      "             (this build's column counts the window; the paper's does not)\n"
      "Sent per step: one all-reduce's 2(N-1)/N 4P for stages 1 and 2 (reduce-scatter, then\n"
      "all-gather), 3(N-1)/N 4P for stage 3.\n";
  return out;
}

}  // namespace gradsync::teach
