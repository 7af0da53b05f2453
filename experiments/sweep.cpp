#include "experiments/sweep.h"

#include <cstdio>
#include <filesystem>
#include <map>

#include "common/atomic_file.h"
#include "common/error.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;

std::string format(const char* fmt, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, fmt, value);
  return buffer;
}

// The preset run a grid point came from: its name without expand_sweep's "-n<N>". Runs that
// differ in anything (comm.overlap, train.batch, a link cap) are different series, even with
// the same strategy.
std::string series_of(const Config& c) {
  const std::string suffix = "-n" + std::to_string(c.workers);
  if (c.strategy != "single" && c.name.size() > suffix.size() && c.name.ends_with(suffix)) {
    return c.name.substr(0, c.name.size() - suffix.size());
  }
  return c.name;
}

double step_seconds(const RunSummary& s) {
  return s.mean_step.compute_s + s.mean_step.communicate_s + s.mean_step.wait_s;
}

double comm_share(const RunSummary& s) {
  const double step = step_seconds(s);
  return step > 0 ? (s.mean_step.communicate_s + s.mean_step.wait_s) / step : 0;
}

double busiest_bytes_per_step(const RunSummary& s) {
  return s.steps > 0 ? static_cast<double>(s.busiest_bytes) / static_cast<double>(s.steps) : 0;
}

double per_worker(const RunSummary& s) { return s.samples_per_s / s.workers; }

}  // namespace

const char* const kSweepColumns =
    "run,strategy,workers,servers,mode,link_gbps,parameters,global_batch,steps,samples_per_s,"
    "scaling_efficiency,step_s,compute_s,communicate_s,wait_s,comm_share,busiest_node,"
    "busiest_bytes_per_step,series";

std::vector<Config> expand_sweep(const Preset& preset) {
  std::vector<Config> grid;
  for (const Config& run : preset.runs) {
    if (run.sweep.workers.empty()) {
      throw ConfigError(preset.path, "sweep.workers",
                        "run `" + run.name + "` has no worker counts to sweep; set e.g. "
                        "sweep: {workers: [1, 2, 4, 8]}");
    }
    if (run.strategy == "single") {
      Config c = run;
      c.workers = 1;
      grid.push_back(c);
      continue;
    }
    for (int n : run.sweep.workers) {
      Config c = run;
      c.workers = n;
      c.name = run.name + "-n" + std::to_string(n);
      grid.push_back(c);
    }
  }
  // Names are unique in the preset, but not necessarily in the grid ("a" at N = 2 and a run
  // named "a-n2", or N listed twice): two runs in one folder would overwrite each other.
  std::map<std::string, const Config*> seen;
  for (const Config& c : grid) {
    if (const auto [it, fresh] = seen.emplace(c.name, &c); !fresh) {
      throw ConfigError(preset.path, "sweep.workers",
                        "two grid points are both named `" + c.name + "` (" +
                            std::to_string(it->second->workers) + " and " +
                            std::to_string(c.workers) +
                            " workers): list each N once and rename runs that end in -n<N>");
    }
  }
  return grid;
}

std::vector<SweepRow> sweep_rows(const std::vector<Config>& configs,
                                 const std::vector<RunSummary>& summaries) {
  GRADSYNC_CHECK(configs.size() == summaries.size(), "one summary per swept run");
  std::vector<SweepRow> rows;
  for (std::size_t i = 0; i < configs.size(); ++i) rows.push_back({configs[i], summaries[i], {}});

  const SweepRow* single = nullptr;
  std::map<std::string, const SweepRow*> smallest;
  for (const SweepRow& row : rows) {
    if (row.config.strategy == "single") single = single ? single : &row;
    const SweepRow*& best = smallest[series_of(row.config)];
    if (!best || row.config.workers < best->config.workers) best = &row;
  }
  for (SweepRow& row : rows) {
    const SweepRow* base = smallest[series_of(row.config)];
    if (base->config.workers != 1 && single) base = single;
    if (per_worker(base->summary) > 0) {
      row.scaling_efficiency = per_worker(row.summary) / per_worker(base->summary);
    }
  }
  return rows;
}

std::string sweep_csv(const std::vector<SweepRow>& rows) {
  std::string out = std::string(kSweepColumns) + "\n";
  for (const SweepRow& row : rows) {
    const Config& c = row.config;
    const RunSummary& s = row.summary;
    const bool ps = c.strategy == "ps";
    out += c.name + "," + c.strategy + "," + std::to_string(c.workers) + "," +
           std::to_string(ps ? c.ps.servers : 0) + "," + (ps ? c.ps.mode : "") + "," +
           format("%g", c.network.link_gbps) + "," + std::to_string(s.parameters) + "," +
           std::to_string(s.global_batch) + "," + std::to_string(s.steps) + "," +
           format("%.3f", s.samples_per_s) + "," +
           (row.scaling_efficiency ? format("%.4f", *row.scaling_efficiency) : "") + "," +
           format("%.6f", step_seconds(s)) + "," + format("%.6f", s.mean_step.compute_s) + "," +
           format("%.6f", s.mean_step.communicate_s) + "," +
           format("%.6f", s.mean_step.wait_s) + "," + format("%.4f", comm_share(s)) + "," +
           s.busiest_node + "," + format("%.0f", busiest_bytes_per_step(s)) + "," +
           series_of(c) + "\n";
  }
  return out;
}

std::string sweep_markdown(const std::vector<SweepRow>& rows) {
  std::string out =
      "| strategy | N | samples/s | scaling efficiency | busiest node, per step | "
      "comm share |\n|---|---:|---:|---:|---|---:|\n";
  for (const SweepRow& row : rows) {
    const Config& c = row.config;
    const RunSummary& s = row.summary;
    std::string strategy = c.strategy;
    if (c.strategy == "ps") strategy += " " + c.ps.mode + " K=" + std::to_string(c.ps.servers);
    out += "| " + strategy + " | " + std::to_string(c.workers) + " | " +
           format("%.0f", s.samples_per_s) + " | " +
           (row.scaling_efficiency ? format("%.0f%%", 100 * *row.scaling_efficiency) : "-") +
           " | " + format("%.1f MiB", busiest_bytes_per_step(s) / (1 << 20)) + " (" +
           s.busiest_node + ") | " + format("%.0f%%", 100 * comm_share(s)) + " |\n";
  }
  return out;
}

SweepOutcome run_sweep(const Preset& preset, const std::string& output_dir) {
  Preset grid{preset.name + "-sweep", preset.path, expand_sweep(preset)};
  const PresetOutcome outcome = run_preset(grid, output_dir);
  std::vector<RunSummary> summaries;
  for (const RunOutcome& run : outcome.runs) summaries.push_back(run.summary);
  SweepOutcome result{outcome.dir, sweep_rows(grid.runs, summaries)};
  write_file_atomically((fs::path(outcome.dir) / "sweep.csv").string(), sweep_csv(result.rows));
  write_file_atomically((fs::path(outcome.dir) / "sweep.md").string(),
                        sweep_markdown(result.rows));
  return result;
}

}  // namespace gradsync
