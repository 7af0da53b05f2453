#include "experiments/calibration_runs.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "experiments/preset.h"

namespace gradsync {

namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path.string(), "cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw DataError(path.string(), "cannot read");
  return text.str();
}

// Compares names piecewise: runs of digits by numeric value, everything else by character.
bool natural_less(const std::string& a, const std::string& b) {
  const auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      std::size_t i_end = i, j_end = j;
      while (i_end < a.size() && digit(a[i_end])) ++i_end;
      while (j_end < b.size() && digit(b[j_end])) ++j_end;
      // Without leading zeros, the longer run of digits is the larger number.
      std::string x = a.substr(i, i_end - i), y = b.substr(j, j_end - j);
      x.erase(0, std::min(x.find_first_not_of('0'), x.size()));
      y.erase(0, std::min(y.find_first_not_of('0'), y.size()));
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = i_end;
      j = j_end;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  if ((a.size() - i) != (b.size() - j)) return (a.size() - i) < (b.size() - j);
  return a < b;  // equal up to leading zeros: any consistent order
}

bool is_run_folder(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "config.yaml", ec);
}

// What the model needs from summary.json.
struct MeasuredRun {
  double parameters = 0;
  double communicate_s = 0;         // communicate + wait, mean per step
  double collectives_per_step = 0;  // allreduce: the buckets it really used; 0: not recorded
};

MeasuredRun read_summary(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    throw DataError(path.string(), "missing (did the run finish?)");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text(path));
  } catch (const nlohmann::json::parse_error& e) {
    throw DataError(path.string(), std::string("not valid JSON: ") + e.what());
  }
  // A key that is absent or not a number names itself in the message.
  const auto number = [&](const nlohmann::json& node, const char* key,
                          const std::string& dotted) -> double {
    if (!node.is_object() || !node.contains(key) || !node.at(key).is_number()) {
      throw DataError(path.string(), dotted + ": missing or not a number");
    }
    return node.at(key).get<double>();
  };
  MeasuredRun run;
  run.parameters = number(j, "parameters", "parameters");
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json& step = j.contains("mean_step_s") ? j.at("mean_step_s") : empty;
  run.communicate_s = number(step, "communicate", "mean_step_s.communicate") +
                      number(step, "wait", "mean_step_s.wait");
  // Absent in summaries of an older gradsync.
  if (j.contains("collectives_per_step")) {
    run.collectives_per_step = number(j, "collectives_per_step", "collectives_per_step");
  }
  return run;
}

// One run folder: an observation, or nothing with a reason in `skipped`.
void read_run(const fs::path& dir, std::vector<cost::Observation>* out,
              std::vector<std::string>* skipped) {
  const std::string label = dir.filename().string();
  const fs::path config_path = dir / "config.yaml";
  // Results are often read on another machine than the one that ran them: the data set need
  // not be here.
  const Preset preset =
      load_preset_text(read_text(config_path), config_path.string(), {}, PresetUse::kToRead);
  const Config& config = preset.runs.front();
  const auto skip = [&](const std::string& reason) {
    if (skipped) skipped->push_back(label + ": " + reason);
  };
  cost::Scenario scenario;
  if (config.strategy == "dp") {
    scenario.scheme = cost::Scheme::kDp;
  } else if (config.strategy == "allreduce") {
    scenario.scheme = cost::Scheme::kRing;
  } else if (config.strategy == "ps") {
    if (config.ps.mode != "sync") {
      return skip("ps " + config.ps.mode + " (the model covers synchronous ps only)");
    }
    scenario.scheme = cost::Scheme::kPs;
    scenario.servers = config.ps.servers;
  } else if (config.strategy == "single") {
    return skip("single (no communication)");
  } else {
    return skip("strategy '" + config.strategy + "' has no cost model");
  }
  if (config.workers < 1) return skip("workers < 1");
  scenario.workers = config.workers;

  const fs::path summary_path = dir / "summary.json";
  const MeasuredRun measured = read_summary(summary_path);
  if (!(measured.parameters >= 0)) {
    throw DataError(summary_path.string(), "parameters: must be >= 0");
  }
  scenario.model_bytes = measured.parameters * sizeof(float);
  if (scenario.scheme == cost::Scheme::kRing) {
    if (measured.collectives_per_step >= 1) {
      // What the strategy issued: buckets close at layer boundaries once they reach bucket_mb,
      // so their count can differ from the size alone's estimate below.
      scenario.buckets = static_cast<int>(std::lround(measured.collectives_per_step));
    } else {
      scenario.buckets = cost::ring_buckets(scenario.model_bytes, config.comm.bucket_mb);  // older
    }
  }
  out->push_back({label, scenario, measured.communicate_s});
}

}  // namespace

std::vector<cost::Observation> read_observations(const std::string& results_dir,
                                                 std::vector<std::string>* skipped) {
  const fs::path root(results_dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throw DataError(results_dir, "no such folder");

  std::vector<fs::path> runs;
  if (is_run_folder(root)) {
    runs.push_back(root);
  } else {
    for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
      if (entry.is_directory(ec) && is_run_folder(entry.path())) runs.push_back(entry.path());
    }
    if (ec) throw DataError(results_dir, "cannot list: " + ec.message());
    // Directory order is arbitrary; sort by name, numbers by value (a sweep's dp-n2 before
    // dp-n16).
    std::sort(runs.begin(), runs.end(), [](const fs::path& a, const fs::path& b) {
      return natural_less(a.filename().string(), b.filename().string());
    });
  }
  if (runs.empty()) {
    throw DataError(results_dir,
                    "no run folders here (a run folder holds config.yaml and summary.json, as "
                    "`gradsync run` writes them)");
  }
  std::vector<cost::Observation> observations;
  for (const fs::path& dir : runs) read_run(dir, &observations, skipped);
  return observations;
}

}  // namespace gradsync
