#include "bench/mlp_throughput.h"

#include <cstdio>

#include "bench/gpu_mlp_throughput.h"
#include "common/error.h"
#include "model/dataset.h"
#include "model/kernels/cpu_kernels.h"
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
  // Every figure carries its ceiling: the path cpuid (or GRADSYNC_KERNELS) chose, its
  // instruction set, and that set's single-core peak measured here, just before the run.
  const CpuPath path = cpu_path();
  const std::string gemm = gemm_name();
  const double peak = measure_peak_gflops(path, 0.5);
  const auto [step, elapsed] = time_training_steps(model, sgd, pool, options);
  const double samples_per_s = static_cast<double>(step * options.batch) / elapsed;
  const double gflops = model.step_flop(options.batch) * static_cast<double>(step) / elapsed / 1e9;
  char line[512];
  if (options.json) {
    std::snprintf(line, sizeof line,
                  "{\"impl\": \"gradsync\", \"samples_per_s\": %.1f, \"steps\": %lld, "
                  "\"seconds\": %.3f, \"batch\": %d, \"threads\": 1, \"path\": \"%s\", "
                  "\"gemm\": \"%s\", \"isa\": \"%s\", \"gflops\": %.1f, \"peak_gflops\": %.1f, "
                  "\"peak_share\": %.3f}",
                  samples_per_s, static_cast<long long>(step), elapsed, options.batch,
                  cpu_path_name(path), gemm.c_str(), cpu_path_isa(path), gflops, peak,
                  gflops / peak);
  } else {
    std::snprintf(line, sizeof line,
                  "gradsync: samples/s=%.1f steps=%lld seconds=%.3f batch=%d threads=1 path=%s "
                  "gemm=%s isa=%s gflops=%.1f peak_gflops=%.1f peak_share=%.0f%%",
                  samples_per_s, static_cast<long long>(step), elapsed, options.batch,
                  cpu_path_name(path), gemm.c_str(), cpu_path_isa(path), gflops, peak,
                  100 * gflops / peak);
  }
  return line;
}

}  // namespace gradsync
