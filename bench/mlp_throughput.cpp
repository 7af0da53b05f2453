#include "bench/mlp_throughput.h"

#include <cstdio>

#include "bench/gpu_mlp_throughput.h"
#include "common/error.h"
#include "model/cpu_gemm.h"
#include "model/dataset.h"
#include "model/mlp.h"
#include "model/optimizer/sgd.h"

namespace gradsync {

std::string run_mlp_bench(const MlpBenchOptions& options) {
  if (options.device == "gpu") return run_gpu_mlp_bench(options);
  if (options.device != "cpu") {
    throw ConfigError("bench", "--device", "'" + options.device + "' (valid: cpu, gpu)");
  }
  const Dataset pool = make_bench_pool(options);
  std::vector<int> widths = {options.input};
  widths.insert(widths.end(), options.hidden.begin(), options.hidden.end());
  widths.push_back(options.classes);
  Mlp model(widths, options.batch);
  model.init_params(1);
  Sgd sgd(model.param_count(), SgdOptions{0.05, 0.9, 0.0});
  const auto [step, elapsed] = time_training_steps(model, sgd, pool, options);
  const double samples_per_s = static_cast<double>(step * options.batch) / elapsed;
  // Which GEMM ran matters for reading the figure: the path cpuid (or GRADSYNC_GEMM) chose.
  const char* kernel = gemm_path_name(gemm_path());
  char line[256];
  if (options.json) {
    std::snprintf(line, sizeof line,
                  "{\"impl\": \"gradsync\", \"samples_per_s\": %.1f, \"steps\": %lld, "
                  "\"seconds\": %.3f, \"batch\": %d, \"threads\": 1, \"gemm\": \"%s\"}",
                  samples_per_s, static_cast<long long>(step), elapsed, options.batch, kernel);
  } else {
    std::snprintf(line, sizeof line,
                  "gradsync: samples/s=%.1f steps=%lld seconds=%.3f batch=%d threads=1 gemm=%s",
                  samples_per_s, static_cast<long long>(step), elapsed, options.batch, kernel);
  }
  return line;
}

}  // namespace gradsync
