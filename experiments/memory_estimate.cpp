// The memory a run needs at least (contract: memory_estimate.h). Everything is counted in double:
// the point is to refuse a model too big to allocate, whose element counts may not fit an int64.
#include "experiments/memory_estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

namespace gradsync {
namespace {

constexpr double kFloat = 4;  // bytes of a parameter, gradient, momentum, activation or feature
constexpr double kLabel = 4;  // an int32 label

// The MLP's widths, as plan_run makes them: input, hidden..., classes.
std::vector<double> mlp_widths(const Config& config, const DataShape& data) {
  std::vector<double> widths = {static_cast<double>(data.dim)};
  for (int width : config.model.hidden) widths.push_back(width);
  widths.push_back(data.classes);
  return widths;
}

double parameter_count(const Config& config, const DataShape& data) {
  if (config.model.kind == "synthetic") return static_cast<double>(config.model.parameters);
  const std::vector<double> w = mlp_widths(config, data);
  double count = 0;
  for (std::size_t l = 0; l + 1 < w.size(); ++l) count += w[l] * w[l + 1] + w[l + 1];  // W, b
  return count;
}

// Floats of one replica's activations: model/mlp.cpp keeps an activation matrix for every width
// and a delta matrix for every width but the input, each train.batch columns wide. The synthetic
// model has none.
double activation_floats(const Config& config, const DataShape& data) {
  if (config.model.kind == "synthetic") return 0;
  const std::vector<double> w = mlp_widths(config, data);
  double rows = 0;
  for (std::size_t l = 0; l < w.size(); ++l) rows += l == 0 ? w[l] : 2 * w[l];
  return rows * config.train.batch;
}

std::string hidden_text(const std::vector<int>& hidden) {
  std::string out = "[";
  for (std::size_t i = 0; i < hidden.size(); ++i) {
    out += (i == 0 ? "" : ", ") + std::to_string(hidden[i]);
  }
  return out + "]";
}

// "key: value" of what drives the largest part of the estimate.
std::string culprit(const Config& config, const MemoryEstimate& e) {
  const double largest = std::max({e.model_bytes, e.activation_bytes, e.data_bytes});
  if (largest == e.activation_bytes) return "train.batch: " + std::to_string(config.train.batch);
  if (largest == e.data_bytes) {
    if (config.data.kind != "synthetic") return "data.dir: " + config.data.dir;
    return config.data.train_samples >= config.data.test_samples
               ? "data.train_samples: " + std::to_string(config.data.train_samples)
               : "data.test_samples: " + std::to_string(config.data.test_samples);
  }
  if (config.model.kind == "synthetic") {
    return "model.parameters: " + std::to_string(config.model.parameters);
  }
  return "model.hidden: " + hidden_text(config.model.hidden);
}

std::string breakdown(const Config& config, const MemoryEstimate& e) {
  std::string out = "parameters, gradients and momentum " + bytes_text(e.model_bytes) +
                    ", activations " + bytes_text(e.activation_bytes) + ", data " +
                    bytes_text(e.data_bytes) + "; ";
  if (config.strategy == "dp" && config.workers > 1) {
    out += std::to_string(config.workers) + " replicas in 1 process";
  } else {
    out += std::to_string(e.processes) + (e.processes == 1 ? " process" : " processes");
  }
  return out;
}

}  // namespace

DataShape data_shape(const DataConfig& data) {
  if (data.kind != "synthetic") return {};
  return {data.train_samples, data.test_samples, data.dim, data.classes};
}

DataShape data_shape(const TrainTest& data) {
  return {data.train.size, data.test.size, data.train.dim, data.train.classes};
}

MemoryEstimate estimate_memory(const Config& config, const DataShape& data) {
  MemoryEstimate e;
  e.parameters = parameter_count(config, data);
  const double p = e.parameters * kFloat;
  const double workers = config.workers;
  const bool ps = config.strategy == "ps";
  const bool own_processes = ps || uses_communicator(config.strategy);
  e.processes = own_processes ? config.workers + (ps ? config.ps.servers : 0) : 1;
  // Parameters and gradients of every replica; the momentum of whoever runs the optimizer.
  // On a GPU the replicas' buffers are device memory: none of that counts here.
  const bool on_host = config.device != "gpu";
  const double replicas = on_host ? workers : 0;  // single has one worker (preset_checks.cpp)
  double momentum_copies = 0;
  if (on_host && !ps) momentum_copies = config.strategy == "allreduce" ? workers : 1;
  // zero: each rank the momentum, parameters and gradients of its 1/N slices: 3 copies in all.
  if (on_host && config.strategy == "zero") momentum_copies = 3;
  // The shards hold the parameters and their momentum, split between them, on the host always.
  const double shard_copies = ps ? 2 : 0;
  e.model_bytes = p * (2 * replicas + momentum_copies + shard_copies);
  e.activation_bytes = replicas * activation_floats(config, data) * kFloat;
  const double samples =
      static_cast<double>(data.train_samples) + static_cast<double>(data.test_samples);
  const double data_copies = own_processes ? workers : 1;  // the workers load their own
  e.data_bytes = data_copies * samples * (data.dim * kFloat + kLabel);
  return e;
}

std::string bytes_text(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  while (bytes >= 1024 && unit + 1 < static_cast<int>(std::size(kUnits))) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit > 0 && bytes < 10 ? "%.1f %s" : "%.0f %s", bytes,
                kUnits[unit]);
  return text;
}

std::optional<double> parse_mem_available(const std::string& meminfo) {
  std::istringstream lines(meminfo);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.starts_with("MemAvailable:")) continue;
    std::istringstream fields(line.substr(line.find(':') + 1));
    double kib = 0;
    std::string unit;
    if (fields >> kib >> unit && unit == "kB" && kib >= 0) return kib * 1024;
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<double> available_memory() {
  std::ifstream in("/proc/meminfo");
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return parse_mem_available(text.str());
}

void check_memory(const Config& config, const DataShape& data, std::optional<double> available) {
  if (!available) return;
  const MemoryEstimate e = estimate_memory(config, data);
  if (e.total() <= *available) return;
  const std::string driver = culprit(config, e);
  const std::size_t colon = driver.find(':');
  throw ConfigError(config.name, driver.substr(0, colon),
                    driver.substr(colon + 2) + " needs about " + bytes_text(e.total()) +
                        " of memory (" + breakdown(config, e) + "); this machine has " +
                        bytes_text(*available) + " available");
}

Error out_of_memory(const Config& config, const DataShape& data, std::optional<double> available) {
  const MemoryEstimate e = estimate_memory(config, data);
  return Error("run " + config.name + ": out of memory (std::bad_alloc): it needs at least " +
               bytes_text(e.total()) + " (" + breakdown(config, e) + ")" +
               (available ? ", and this machine had " + bytes_text(*available) + " available"
                          : std::string()) +
               "; lower model.hidden, train.batch or workers");
}

}  // namespace gradsync
