// How much host memory a run needs at least, from its configuration and its data's shape, and
// the refusal of one that cannot fit this machine, made before anything is allocated or created:
//
//   check_memory(config, data_shape(config.data), available_memory());  // before loading data
//   check_memory(config, data_shape(loaded), available_memory());       // once it is loaded
//
// The estimate counts only what a run certainly allocates, so that it refuses no run that could
// fit: per replica the parameters and gradients (4 bytes each) and the MLP's activations and
// their gradients for train.batch samples; the optimizer's momentum (one copy per process that
// steps: single, dp's replica 0, every allreduce rank, ps' shards together); and one copy of the
// data set per process (the worker processes of allreduce and ps each load their own). On a
// GPU (device: gpu) the model lives in device memory and only the data (and ps' shards) count.
// Threads, sockets, traces and the process images are left out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/config.h"
#include "common/error.h"
#include "model/dataset.h"

namespace gradsync {

// What the estimate needs to know of the data: samples and widths.
struct DataShape {
  std::int64_t train_samples = 0;
  std::int64_t test_samples = 0;
  int dim = 1;
  int classes = 1;
};

// Synthetic data: its shape from data.*. A data set read from files is not known before it is
// loaded: no samples and widths of 1, which keep the estimate a lower bound.
DataShape data_shape(const DataConfig& data);
DataShape data_shape(const TrainTest& data);

struct MemoryEstimate {
  double parameters = 0;        // the model's parameter count
  double model_bytes = 0;       // parameters, gradients and momentum: every copy on this host
  double activation_bytes = 0;  // every replica's activations and their gradients
  double data_bytes = 0;        // every process's copy of the data set
  int processes = 1;            // on this host: 1 for single and dp, ranks (+ shards) otherwise
  double total() const { return model_bytes + activation_bytes + data_bytes; }
};

MemoryEstimate estimate_memory(const Config& config, const DataShape& data);

// "512 B", "3.5 MiB", "120 GiB": binary units, two or three significant digits.
std::string bytes_text(double bytes);

// MemAvailable of /proc/meminfo in bytes: what can be allocated without swapping. nullopt where
// it cannot be read (not Linux, or a kernel before 3.14): then nothing is refused.
std::optional<double> available_memory();
// The same from the text of a /proc/meminfo.
std::optional<double> parse_mem_available(const std::string& meminfo);

// Throws a one-line ConfigError when the estimate exceeds `available` bytes:
//   "big: model.hidden: [100000, 100000] needs about 112 GiB of memory (parameters, gradients
//   and momentum 112 GiB, activations 98 MiB, data 1.3 MiB; 1 process); this machine has
//   23 GiB available"
// It names the run and the key behind the largest part: model.hidden (or model.parameters for
// the synthetic model), train.batch for activations, the data's size for data. Nothing is
// refused when `available` is nullopt.
void check_memory(const Config& config, const DataShape& data, std::optional<double> available);

// For a std::bad_alloc the estimate did not foresee: one line naming the run, its estimate and
// what was available, instead of a bare "std::bad_alloc".
Error out_of_memory(const Config& config, const DataShape& data, std::optional<double> available);

}  // namespace gradsync
