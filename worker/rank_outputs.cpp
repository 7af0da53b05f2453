#include "worker/rank_outputs.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/host_id.h"

namespace gradsync {
namespace fs = std::filesystem;
namespace {

void write_json_atomically(const std::string& path, const nlohmann::json& j) {
  write_file_atomically(path, j.dump() + "\n");
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": malformed: " + e.what());
  }
}

// JSON has no NaN or infinity: nlohmann writes either (a diverged run's loss) as null. Read
// back, null is NaN, so a run that diverged still reports, with its loss shown as nan.
double number_or_nan(const nlohmann::json& value) {
  return value.is_null() ? std::numeric_limits<double>::quiet_NaN() : value.get<double>();
}

}  // namespace

std::string rank_result_path(const std::string& run_dir, int rank) {
  return (fs::path(run_dir) / ("rank" + std::to_string(rank) + ".json")).string();
}

std::string rank_trace_path(const std::string& run_dir, int rank) {
  return (fs::path(run_dir) / ("trace.rank" + std::to_string(rank) + ".json")).string();
}

std::string shard_trace_path(const std::string& run_dir, int shard) {
  return (fs::path(run_dir) / ("trace.shard" + std::to_string(shard) + ".json")).string();
}

std::vector<std::string> run_trace_paths(const Config& config, const std::string& run_dir) {
  std::vector<std::string> paths;
  for (int r = 0; r < config.workers; ++r) paths.push_back(rank_trace_path(run_dir, r));
  for (int k = 0; config.strategy == "ps" && k < config.ps.servers; ++k) {
    paths.push_back(shard_trace_path(run_dir, k));
  }
  return paths;
}

void write_rank_result(const std::string& path, const LoopResult& r) {
  nlohmann::json evals = nlohmann::json::array();
  for (const EvalPoint& e : r.evals) {
    evals.push_back({e.step, e.train_seconds, e.test_loss, e.test_accuracy});
  }
  write_json_atomically(path, {{"steps", r.steps},
                               {"train_seconds", r.train_seconds},
                               {"final_loss", r.final_loss},
                               {"parameters", r.parameters},
                               {"compute_s", r.totals.compute_s},
                               {"communicate_s", r.totals.communicate_s},
                               {"wait_s", r.totals.wait_s},
                               {"bytes_sent", r.totals.bytes_sent},
                               {"bytes_received", r.totals.bytes_received},
                               {"collectives", r.totals.collectives},
                               {"between_steps_s", r.between_steps_s},
                               {"peak_model_state_bytes", r.peak_model_state_bytes},
                               {"peak_model_state_bytes_by_kind",
                                {{"params", r.peak_params_bytes},
                                 {"grads", r.peak_grads_bytes},
                                 {"optimizer", r.peak_optimizer_bytes}}},
                               {"step_seconds", r.step_seconds},
                               {"backend", r.backend},
                               {"host", this_host_id()},
                               {"evals", evals}});
}

LoopResult read_rank_result(const std::string& path, std::string* host) {
  const nlohmann::json j = read_json(path);
  try {
    LoopResult r;
    r.steps = j.at("steps");
    r.train_seconds = j.at("train_seconds");
    r.final_loss = number_or_nan(j.at("final_loss"));
    r.parameters = j.at("parameters");
    r.totals.compute_s = j.at("compute_s");
    r.totals.communicate_s = j.at("communicate_s");
    r.totals.wait_s = j.at("wait_s");
    r.totals.bytes_sent = j.at("bytes_sent");
    r.totals.bytes_received = j.at("bytes_received");
    r.totals.collectives = j.at("collectives");
    r.between_steps_s = j.at("between_steps_s");
    r.step_seconds = j.at("step_seconds").get<std::vector<float>>();
    // Absent from a file written before the ledger: 0, shown as not measured.
    r.peak_model_state_bytes = j.value("peak_model_state_bytes", std::uint64_t{0});
    if (j.contains("peak_model_state_bytes_by_kind")) {
      const nlohmann::json& kinds = j.at("peak_model_state_bytes_by_kind");
      r.peak_params_bytes = kinds.at("params");
      r.peak_grads_bytes = kinds.at("grads");
      r.peak_optimizer_bytes = kinds.at("optimizer");
    }
    r.backend = j.value("backend", std::string());
    if (host != nullptr) *host = j.value("host", std::string());
    for (const auto& e : j.at("evals")) {
      r.evals.push_back({e.at(0), e.at(1), number_or_nan(e.at(2)), number_or_nan(e.at(3))});
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": malformed rank result: " + e.what());
  }
}

std::string server_result_path(const std::string& run_dir, int shard) {
  return (fs::path(run_dir) / ("server" + std::to_string(shard) + ".json")).string();
}

void write_server_traffic(const std::string& path, std::uint64_t bytes_sent,
                          std::uint64_t bytes_received) {
  write_json_atomically(path, {{"bytes_sent", bytes_sent}, {"bytes_received", bytes_received}});
}

std::uint64_t read_server_traffic(const std::string& path) {
  const nlohmann::json j = read_json(path);
  try {
    return j.at("bytes_sent").get<std::uint64_t>() + j.at("bytes_received").get<std::uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": malformed server result: " + e.what());
  }
}

void merge_traces(const std::vector<std::string>& inputs, const std::string& out) {
  nlohmann::json events = nlohmann::json::array();
  std::int64_t dropped = 0;
  nlohmann::json cap = nullptr;
  for (const std::string& path : inputs) {
    if (!fs::exists(path)) continue;
    nlohmann::json trace = read_json(path);
    for (auto& event : trace.at("traceEvents")) events.push_back(std::move(event));
    // Each rank counted its own dropped spans; the run's trace reports them all.
    if (trace.contains("otherData")) {
      dropped += trace["otherData"].value("dropped_spans", std::int64_t{0});
      cap = trace["otherData"].value("max_spans_per_owner", nlohmann::json(nullptr));
    }
    fs::remove(path);
  }
  write_json_atomically(
      out, {{"traceEvents", events},
            {"displayTimeUnit", "ms"},
            {"otherData", {{"dropped_spans", dropped}, {"max_spans_per_owner", cap}}}});
}

void wait_for_run_outputs(const Config& config, const std::string& run_dir, int rank,
                          std::chrono::milliseconds timeout) {
  std::vector<std::string> expected;
  for (int r = 0; r < config.workers; ++r) {
    if (r != rank) expected.push_back(rank_result_path(run_dir, r));
  }
  for (int k = 0; config.strategy == "ps" && k < config.ps.servers; ++k) {
    expected.push_back(server_result_path(run_dir, k));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::string missing;
    for (const std::string& path : expected) {
      if (!fs::exists(path))
        missing += (missing.empty() ? "" : ", ") + fs::path(path).filename().string();
    }
    if (missing.empty()) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      throw TimeoutError(rank, run_dir, "collecting the run's results",
                         "after " + std::to_string(timeout.count() / 1000) + " s still no " +
                             missing +
                             " (did every process finish, and do "
                             "they share this run folder?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

RunSummary fold_rank_outputs(const Config& config, const std::string& run_dir,
                             std::vector<HostLink> host_links) {
  merge_traces(run_trace_paths(config, run_dir), (fs::path(run_dir) / "trace.json").string());
  // A worker the shards dropped (ps.continue_without_dead_workers) wrote no result: the
  // summary is the others', and names it.
  const bool may_drop = config.strategy == "ps" && config.ps.continue_without_dead_workers;
  std::vector<LoopResult> results;
  std::vector<int> ranks, dropped;
  std::vector<RankHost> hosts;
  for (int r = 0; r < config.workers; ++r) {
    const std::string path = rank_result_path(run_dir, r);
    if (may_drop && !fs::exists(path)) {
      dropped.push_back(r);
      continue;
    }
    std::string host;
    results.push_back(read_rank_result(path, &host));
    ranks.push_back(r);
    if (!host.empty()) hosts.push_back({r, host});
    fs::remove(path);
  }
  if (results.empty()) {
    throw Error(run_dir + ": no worker finished: every one was dropped (no rank*.json)");
  }
  std::vector<NodeTraffic> servers;
  for (int k = 0; config.strategy == "ps" && k < config.ps.servers; ++k) {
    const std::string path = server_result_path(run_dir, k);
    servers.push_back({"server " + std::to_string(k), read_server_traffic(path)});
    fs::remove(path);
  }
  RunSummary summary = summarize(config, results.front().parameters, results, servers, ranks);
  summary.dropped_workers = dropped;
  summary.rank_hosts = hosts;
  add_host_links(summary, std::move(host_links));
  write_summary((fs::path(run_dir) / "summary.json").string(), summary);
  return summary;
}

}  // namespace gradsync
