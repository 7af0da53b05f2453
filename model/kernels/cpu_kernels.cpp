#include "model/kernels/cpu_kernels.h"

#include <atomic>
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
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("fma");
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

// The library that takes a path's products where it is installed, else null.
kernels::KernelTable::Gemm library_gemm(CpuPath path) {
#if defined(GRADSYNC_X86_KERNELS)
  if (path == CpuPath::kAvx512) return kernels::onednn_gemm();
  if (path == CpuPath::kAvx2) return kernels::openblas_gemm();
#endif
  (void)path;
  return nullptr;
}

decltype(kernels::KernelTable::gemm_tn) library_gemm_tn(CpuPath path) {
#if defined(GRADSYNC_X86_KERNELS)
  if (path == CpuPath::kAvx512) return kernels::onednn_gemm_tn();
  if (path == CpuPath::kAvx2) return kernels::openblas_gemm_tn();
#endif
  (void)path;
  return nullptr;
}

// One table per path and source, built on first use of that pair (loading its library then); a
// path whose library is absent gets its own table for both sources.
struct Choice {
  const kernels::KernelTable* table;
  CpuPath path;
  GemmSource source;
};

const Choice& choice_of(CpuPath path, GemmSource source) {
  static std::mutex mutex;
  static std::unique_ptr<Choice> built[3][2];
  static std::unique_ptr<kernels::KernelTable> with_library[3];
  const int p = static_cast<int>(path), s = static_cast<int>(source);
  std::lock_guard<std::mutex> lock(mutex);
  if (!built[p][s]) {
    const kernels::KernelTable* table = &own_table(path);
    const kernels::KernelTable::Gemm library =
        source == GemmSource::kLibrary ? library_gemm(path) : nullptr;
    if (library != nullptr) {
      with_library[p] = std::make_unique<kernels::KernelTable>(*table);
      with_library[p]->gemm = library;
      with_library[p]->gemm_tn = library_gemm_tn(path);
      table = with_library[p].get();
    }
    built[p][s] = std::make_unique<Choice>(Choice{table, path, source});
  }
  return *built[p][s];
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

namespace {

// What every call goes through: chosen on first use, replaced only by set_cpu_path(). The
// tables of the paths this CPU cannot run are never built, so nothing loads a library (or
// reads a variable) before the first product.
std::atomic<const Choice*>& active() {
  static std::atomic<const Choice*> choice{
      &choice_of(cpu_path_for(std::getenv(kPathEnv)), gemm_source_for(std::getenv(kGemmEnv)))};
  return choice;
}

const kernels::KernelTable& kernels_now() {
  return *active().load(std::memory_order_relaxed)->table;
}

}  // namespace

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

CpuPath cpu_path() { return active().load()->path; }

void check_kernel_environment() {
  // Parsed only: the tables (and the libraries they load) wait for the first product.
  (void)cpu_path_for(std::getenv(kPathEnv));
  (void)gemm_source_for(std::getenv(kGemmEnv));
}

void set_cpu_path(CpuPath path, GemmSource source) {
  if (!cpu_has(path)) {
    throw Error(std::string("kernel path ") + cpu_path_name(path) + ": this CPU cannot run it");
  }
  active().store(&choice_of(path, source));
}

std::string gemm_name() {
  const Choice& now = *active().load();
  if (now.path == CpuPath::kPortable) return "eigen";
#if defined(GRADSYNC_X86_KERNELS)
  if (now.table->gemm == kernels::onednn_gemm()) {
    return std::string("onednn:") + kernels::onednn_kernels();
  }
  if (now.table->gemm == kernels::openblas_gemm()) {
    return std::string("openblas:") + kernels::openblas_kernels();
  }
#endif
  return "own";
}

double measure_peak_gflops(CpuPath path, double seconds) {
  if (!cpu_has(path)) {
    throw Error(std::string("kernel path ") + cpu_path_name(path) + ": this CPU cannot run it");
  }
  return own_table(path).peak_gflops(seconds);
}

void gemm_nn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, bool accumulate) {
  kernels_now().gemm(false, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

void gemm_nt(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, bool accumulate) {
  kernels_now().gemm(true, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

void gemm_tn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
             int ldc, float* scratch, bool accumulate) {
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
