#include "model/kernels/cpu_kernels.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "common/error.h"
#include "model/kernels/kernel_table.h"
#if defined(GRADSYNC_X86_KERNELS)
#include "model/kernels/gemm_libraries.h"
#endif

namespace gradsync {
namespace {

constexpr const char* kPathEnv = "GRADSYNC_KERNELS";
constexpr const char* kGemmEnv = "GRADSYNC_GEMM";
constexpr CpuPath kFastestFirst[] = {CpuPath::kAvx512, CpuPath::kAvx2, CpuPath::kPortable};

bool cpu_has(CpuPath path) {
#if defined(GRADSYNC_X86_KERNELS)
  switch (path) {
    case CpuPath::kAvx512:
      // AVX2 too: the path's transpose is the AVX2 one.
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuPath::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuPath::kPortable:
      return true;
  }
  return false;
#else
  return path == CpuPath::kPortable;
#endif
}

const kernels::KernelTable& own_table(CpuPath path) {
  switch (path) {
#if defined(GRADSYNC_X86_KERNELS)
    case CpuPath::kAvx512:
      return kernels::avx512_table();
    case CpuPath::kAvx2:
      return kernels::avx2_table();
#endif
    default:
      return kernels::portable_table();
  }
}

// The library that takes a path's products, loaded now where it is installed; its products
// (nn/nt, and tn as it lies) and what it says it runs. Nothing where it is not installed.
struct Library {
  kernels::KernelTable::Gemm gemm = nullptr;
  decltype(kernels::KernelTable::gemm_tn) gemm_tn = nullptr;
  std::string label;
};

Library library_for(CpuPath path) {
#if defined(GRADSYNC_X86_KERNELS)
  if (path == CpuPath::kAvx512 && kernels::onednn_gemm() != nullptr) {
    return {kernels::onednn_gemm(), kernels::onednn_gemm_tn(),
            std::string("onednn:") + kernels::onednn_kernels()};
  }
  if (path == CpuPath::kAvx2 && kernels::openblas_gemm() != nullptr) {
    return {kernels::openblas_gemm(), kernels::openblas_gemm_tn(),
            std::string("openblas:") + kernels::openblas_kernels()};
  }
#endif
  (void)path;
  return {};
}

// One path and source of products: its table (the own one, or a copy with the library's
// products) and what gemm_name() says of it.
struct Choice {
  kernels::KernelTable table;
  CpuPath path;
  std::string gemm;
};

// Built on first use of each path and source (loading that path's library then), kept for the
// process's life; set_cpu_path() never builds a path this CPU cannot run.
const Choice& choice_of(CpuPath path, GemmSource source) {
  static std::mutex mutex;
  static std::unique_ptr<const Choice> built[3][2];
  const int p = static_cast<int>(path), s = static_cast<int>(source);
  std::lock_guard<std::mutex> lock(mutex);
  if (!built[p][s]) {
    auto choice = std::make_unique<Choice>(
        Choice{own_table(path), path, path == CpuPath::kPortable ? "eigen" : "own"});
    if (source == GemmSource::kLibrary) {
      const Library library = library_for(path);
      if (library.gemm != nullptr) {
        choice->table.gemm = library.gemm;
        choice->table.gemm_tn = library.gemm_tn;
        choice->gemm = library.label;
      }
    }
    built[p][s] = std::move(choice);
  }
  return *built[p][s];
}

// What every call goes through: chosen from the two variables on first use (main() makes that
// happen before any thread starts: check_kernel_environment), replaced only by set_cpu_path().
std::atomic<const Choice*>& active() {
  static std::atomic<const Choice*> choice{
      &choice_of(cpu_path_for(std::getenv(kPathEnv)), gemm_source_for(std::getenv(kGemmEnv)))};
  return choice;
}

const kernels::KernelTable& kernels_now() {
  return active().load(std::memory_order_acquire)->table;
}

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// C = 0 (or left as it is, when accumulating) for a product with nothing to sum: what the own
// kernels do, and what a library refuses or does its own way when K is 0.
bool nothing_to_sum(int m, int n, int k, float* c, int ldc, bool accumulate) {
  if (m <= 0 || n <= 0) return true;
  if (k > 0) return false;
  if (!accumulate) {
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) c[static_cast<long>(j) * ldc + i] = 0.f;
    }
  }
  return true;
}

}  // namespace

CpuPath cpu_path_for(const char* forced) {
  if (forced == nullptr || *forced == '\0') {
    for (CpuPath path : kFastestFirst) {
      if (cpu_has(path)) return path;
    }
  }
  const std::string name = forced;
  for (CpuPath path : kFastestFirst) {
    if (name != cpu_path_name(path)) continue;
    if (!cpu_has(path)) {
      throw ConfigError(
          "environment", kPathEnv,
          "'" + name + "': this CPU cannot run that path (it lacks the instructions)");
    }
    return path;
  }
  throw ConfigError("environment", kPathEnv,
                    "'" + name + "' is not a kernel path (avx512, avx2 or portable)");
}

GemmSource gemm_source_for(const char* forced) {
  if (forced == nullptr || *forced == '\0' || std::string(forced) == "library") {
    return GemmSource::kLibrary;
  }
  if (std::string(forced) == "own") return GemmSource::kOwn;
  throw ConfigError("environment", kGemmEnv,
                    "'" + std::string(forced) + "' is not a source of products (library or own)");
}

const char* cpu_path_name(CpuPath path) {
  switch (path) {
    case CpuPath::kAvx512:
      return "avx512";
    case CpuPath::kAvx2:
      return "avx2";
    case CpuPath::kPortable:
      return "portable";
  }
  return "?";
}

const char* cpu_path_isa(CpuPath path) {
  switch (path) {
    case CpuPath::kAvx512:
      return "avx512f+vl+bw+dq+fma";
    case CpuPath::kAvx2:
      return "avx2+fma";
    case CpuPath::kPortable:
#if defined(GRADSYNC_NATIVE_BUILD)
      return "native";  // the build machine's own set (-march=native)
#elif defined(__x86_64__)
      return "sse2";  // x86-64's baseline
#else
      return "baseline";
#endif
  }
  return "?";
}

bool cpu_runs(CpuPath path) { return cpu_has(path); }

CpuPath cpu_path() { return active().load(std::memory_order_acquire)->path; }

void check_kernel_environment() { (void)cpu_path(); }

void set_cpu_path(CpuPath path, GemmSource source) {
  if (!cpu_has(path)) {
    throw Error(std::string("kernel path ") + cpu_path_name(path) + ": this CPU cannot run it");
  }
  active().store(&choice_of(path, source), std::memory_order_release);
}

std::string gemm_name() { return active().load(std::memory_order_acquire)->gemm; }

double measure_peak_gflops(CpuPath path, double seconds) {
  if (!cpu_has(path)) {
    throw Error(std::string("kernel path ") + cpu_path_name(path) + ": this CPU cannot run it");
  }
  return own_table(path).peak_gflops(seconds, monotonic_seconds);
}

void gemm_nn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, bool accumulate) {
  if (nothing_to_sum(m, n, k, c, ldc, accumulate)) return;
  kernels_now().gemm(false, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

void gemm_nt(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, bool accumulate) {
  if (nothing_to_sum(m, n, k, c, ldc, accumulate)) return;
  kernels_now().gemm(true, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

void gemm_tn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, float* scratch, bool accumulate) {
  if (nothing_to_sum(m, n, k, c, ldc, accumulate)) return;
  const kernels::KernelTable& now = kernels_now();
  if (now.gemm_tn != nullptr) return now.gemm_tn(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
  // A is K x M with leading dimension lda: its transpose, M x K, goes to the dense scratch.
  if (lda == k) {
    now.transpose(k, m, a, scratch);
  } else {
    for (int i = 0; i < m; ++i) {
      for (int kk = 0; kk < k; ++kk)
        scratch[static_cast<long>(kk) * m + i] = a[static_cast<long>(i) * lda + kk];
    }
  }
  now.gemm(false, m, n, k, scratch, m, b, ldb, c, ldc, accumulate);
}

void transpose(int rows, int cols, const float* in, float* out) {
  kernels_now().transpose(rows, cols, in, out);
}

void bias_activation(int rows, int cols, const float* bias, float* out, int ldo, bool relu) {
  kernels_now().bias_activation(rows, cols, bias, out, ldo, relu);
}

void relu_backward(int rows, int cols, const float* activation, int lda, float* delta, int ldd) {
  kernels_now().relu_backward(rows, cols, activation, lda, delta, ldd);
}

void bias_gradient(int rows, int cols, const float* delta, int ldd, float* grad, bool accumulate) {
  kernels_now().bias_gradient(rows, cols, delta, ldd, grad, accumulate);
}

SoftmaxCrossEntropy softmax_cross_entropy(int classes, int cols, const float* logits, int ldl,
                                          const std::int32_t* labels, float grad_scale,
                                          float* delta, int ldd) {
  return kernels_now().softmax_cross_entropy(classes, cols, logits, ldl, labels, grad_scale, delta,
                                             ldd);
}

void sgd_update(std::size_t n, float* params, const float* grads, float* velocity, float lr,
                float momentum, float weight_decay, float keep) {
  kernels_now().sgd_update(n, params, grads, velocity, lr, momentum, weight_decay, keep);
}

}  // namespace gradsync
