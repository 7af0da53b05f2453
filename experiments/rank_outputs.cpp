#include "experiments/rank_outputs.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace gradsync {
namespace fs = std::filesystem;
namespace {

void write_json_atomically(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump() << '\n';
    if (!out) throw Error(tmp + ": cannot write");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw Error(path + ": cannot write: " + ec.message());
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

}  // namespace

std::string rank_result_path(const std::string& run_dir, int rank) {
  return (fs::path(run_dir) / ("rank" + std::to_string(rank) + ".json")).string();
}

std::string rank_trace_path(const std::string& run_dir, int rank) {
  return (fs::path(run_dir) / ("trace.rank" + std::to_string(rank) + ".json")).string();
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
                               {"evals", evals}});
}

LoopResult read_rank_result(const std::string& path) {
  const nlohmann::json j = read_json(path);
  try {
    LoopResult r;
    r.steps = j.at("steps");
    r.train_seconds = j.at("train_seconds");
    r.final_loss = j.at("final_loss");
    r.parameters = j.at("parameters");
    r.totals.compute_s = j.at("compute_s");
    r.totals.communicate_s = j.at("communicate_s");
    r.totals.wait_s = j.at("wait_s");
    r.totals.bytes_sent = j.at("bytes_sent");
    r.totals.bytes_received = j.at("bytes_received");
    for (const auto& e : j.at("evals")) r.evals.push_back({e.at(0), e.at(1), e.at(2), e.at(3)});
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": malformed rank result: " + e.what());
  }
}

void merge_traces(const std::vector<std::string>& inputs, const std::string& out) {
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json other = nlohmann::json::object();
  for (const std::string& path : inputs) {
    if (!fs::exists(path)) continue;
    nlohmann::json trace = read_json(path);
    for (auto& event : trace.at("traceEvents")) events.push_back(std::move(event));
    if (trace.contains("otherData")) other = trace["otherData"];
    fs::remove(path);
  }
  write_json_atomically(out, {{"traceEvents", events}, {"displayTimeUnit", "ms"},
                              {"otherData", other}});
}

}  // namespace gradsync
