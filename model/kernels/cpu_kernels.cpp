#include "model/cpu_gemm.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "model/kernels/gemm_kernels.h"

namespace gradsync {
namespace {

constexpr const char* kGemmEnv = "GRADSYNC_GEMM";

bool cpu_has(GemmPath path) {
#if defined(GRADSYNC_X86_KERNELS)
  switch (path) {
    case GemmPath::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
    case GemmPath::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case GemmPath::kPortable:
      return true;
  }
  return false;
#else
  return path == GemmPath::kPortable;
#endif
}

}  // namespace

GemmPath gemm_path_for(const char* forced) {
  if (forced == nullptr || *forced == '\0') {
    for (GemmPath path : {GemmPath::kAvx512, GemmPath::kAvx2}) {
      if (cpu_has(path)) return path;
    }
    return GemmPath::kPortable;
  }
  const std::string name = forced;
  for (GemmPath path : {GemmPath::kAvx512, GemmPath::kAvx2, GemmPath::kPortable}) {
    if (name != gemm_path_name(path)) continue;
    if (!cpu_has(path)) {
      throw ConfigError(
          "environment", kGemmEnv,
          "'" + name + "': this CPU cannot run that path (it lacks the instructions)");
    }
    return path;
  }
  throw ConfigError("environment", kGemmEnv,
                    "'" + name + "' is not a gemm path (avx512, avx2 or portable)");
}

namespace {

std::atomic<int>& active() {
  static std::atomic<int> path{static_cast<int>(gemm_path_for(std::getenv(kGemmEnv)))};
  return path;
}

void gemm(bool transposed_b, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
          float* c, int ldc, bool accumulate) {
  switch (static_cast<GemmPath>(active().load(std::memory_order_relaxed))) {
#if defined(GRADSYNC_X86_KERNELS)
    case GemmPath::kAvx512:
      return kernels::gemm_avx512(transposed_b, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
    case GemmPath::kAvx2:
      return kernels::gemm_avx2(transposed_b, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
#endif
    default:
      return kernels::gemm_portable(transposed_b, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
  }
}

}  // namespace

const char* gemm_path_name(GemmPath path) {
  switch (path) {
    case GemmPath::kAvx512:
      return "avx512";
    case GemmPath::kAvx2:
      return "avx2";
    case GemmPath::kPortable:
      return "portable";
  }
  return "?";
}

bool cpu_runs(GemmPath path) { return cpu_has(path); }

GemmPath gemm_path() { return static_cast<GemmPath>(active().load()); }

void set_gemm_path(GemmPath path) {
  if (!cpu_has(path)) {
    throw Error(std::string("gemm path ") + gemm_path_name(path) + ": this CPU cannot run it");
  }
  active().store(static_cast<int>(path));
}

void gemm_nn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, bool accumulate) {
  gemm(false, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

void gemm_nt(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, bool accumulate) {
  gemm(true, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

void transpose(int rows, int cols, const float* in, float* out) {
  constexpr int kTile = 16;
  for (int j0 = 0; j0 < cols; j0 += kTile) {
    const int j1 = j0 + kTile < cols ? j0 + kTile : cols;
    for (int i0 = 0; i0 < rows; i0 += kTile) {
      const int i1 = i0 + kTile < rows ? i0 + kTile : rows;
      for (int i = i0; i < i1; ++i) {
        for (int j = j0; j < j1; ++j) {
          out[static_cast<long>(i) * cols + j] = in[static_cast<long>(j) * rows + i];
        }
      }
    }
  }
}

}  // namespace gradsync
