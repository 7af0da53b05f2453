#include "model/kernels/gemm_libraries.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/error.h"

namespace gradsync::kernels {
namespace {

// ---- oneDNN ---------------------------------------------------------------------------------
// dnnl_sgemm is row-major: column-major C = A op(B) is row-major C^T = op(B)^T A^T, so the
// operands swap. Its OpenMP runtime would otherwise run each product on every core: a rank's
// step runs on one, so each thread that calls it asks its runtime for one thread, once.
using DnnlSgemm = int (*)(char trans_a, char trans_b, long m, long n, long k, float alpha,
                          const float* a, long lda, const float* b, long ldb, float beta, float* c,
                          long ldc);
struct OneDnn {
  DnnlSgemm sgemm = nullptr;
  void (*omp_set_num_threads)(int) = nullptr;
  std::string kernels = "not installed";
};

const OneDnn& onednn() {
  static const OneDnn loaded = [] {
    OneDnn lib;
    void* handle = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return lib;
    lib.sgemm = reinterpret_cast<DnnlSgemm>(dlsym(handle, "dnnl_sgemm"));
    lib.omp_set_num_threads = reinterpret_cast<void (*)(int)>(dlsym(handle, "omp_set_num_threads"));
    auto effective = reinterpret_cast<int (*)()>(dlsym(handle, "dnnl_get_effective_cpu_isa"));
    if (effective != nullptr) {
      // dnnl_cpu_isa_t (oneapi/dnnl/dnnl_types.h); the values this code may meet.
      switch (effective()) {
        case 0x7:
          lib.kernels = "avx2";
          break;
        case 0x27:
          lib.kernels = "avx512_core";
          break;
        case 0x67:
          lib.kernels = "avx512_core_vnni";
          break;
        case 0xe7:
          lib.kernels = "avx512_core_bf16";
          break;
        default:
          lib.kernels = "isa " + std::to_string(effective());
          break;
      }
    }
    return lib;
  }();
  return loaded;
}

// Row-major C[rows x cols] = op(first) op(second) on one thread of the caller's OpenMP runtime.
void onednn_row_major(char op_first, char op_second, int rows, int cols, int k, const float* first,
                      int ld_first, const float* second, int ld_second, float* c, int ldc,
                      bool accumulate) {
  if (rows <= 0 || cols <= 0) return;
  const OneDnn& lib = onednn();
  thread_local const bool one_thread =
      lib.omp_set_num_threads != nullptr && (lib.omp_set_num_threads(1), true);
  (void)one_thread;
  const int status = lib.sgemm(op_first, op_second, rows, cols, k, 1.f, first, ld_first, second,
                               ld_second, accumulate ? 1.f : 0.f, c, ldc);
  GRADSYNC_CHECK(status == 0, "oneDNN's dnnl_sgemm failed with status " + std::to_string(status));
}

void onednn_product(bool transposed_b, int m, int n, int k, const float* a, int lda, const float* b,
                    int ldb, float* c, int ldc, bool accumulate) {
  onednn_row_major(transposed_b ? 'T' : 'N', 'N', n, m, k, b, ldb, a, lda, c, ldc, accumulate);
}

// Column-major C = A^T B is row-major C^T = B^T A: column-major B (K x N) is row-major B^T as
// it lies, and column-major A (K x M) is row-major A^T, read transposed.
void onednn_product_tn(int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                       float* c, int ldc, bool accumulate) {
  onednn_row_major('N', 'T', n, m, k, b, ldb, a, lda, c, ldc, accumulate);
}

// ---- OpenBLAS -------------------------------------------------------------------------------
using CblasSgemm = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                            const float* a, int lda, const float* b, int ldb, float beta, float* c,
                            int ldc);
constexpr int kColMajor = 102, kNoTrans = 111, kTrans = 112;  // cblas.h

struct OpenBlas {
  CblasSgemm sgemm = nullptr;
  std::string kernels = "not installed";
};

const OpenBlas& openblas() {
  static const OpenBlas loaded = [] {
    OpenBlas lib;
    // OpenBLAS picks its kernels from cpuid when it loads, and reads OPENBLAS_CORETYPE then
    // only: set for the load (on a CPU with AVX-512 it would take those) and put back after,
    // so that no process started later inherits it. Loaded while the process has one thread
    // (check_kernel_environment() from main), since setenv races with getenv elsewhere. An
    // OpenBLAS already in the process keeps the kernels it chose: the label says which.
    const char* before = std::getenv("OPENBLAS_CORETYPE");
    const std::string saved = before != nullptr ? before : "";
    const bool hold_to_avx2 = __builtin_cpu_supports("avx512f");
    if (hold_to_avx2) setenv("OPENBLAS_CORETYPE", "Haswell", 1);
    void* handle =
        dlopen("/usr/lib/x86_64-linux-gnu/openblas-serial/libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) handle = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (hold_to_avx2) {
      if (before != nullptr) {
        setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
      } else {
        unsetenv("OPENBLAS_CORETYPE");
      }
    }
    if (handle == nullptr) return lib;
    lib.sgemm = reinterpret_cast<CblasSgemm>(dlsym(handle, "cblas_sgemm"));
    // The fallback name may find a threaded build: a rank's step runs on one core.
    if (auto threads = reinterpret_cast<void (*)(int)>(dlsym(handle, "openblas_set_num_threads"))) {
      threads(1);
    }
    auto core = reinterpret_cast<const char* (*)()>(dlsym(handle, "openblas_get_corename"));
    lib.kernels = core != nullptr ? core() : "?";
    return lib;
  }();
  return loaded;
}

void openblas_product(bool transposed_b, int m, int n, int k, const float* a, int lda,
                      const float* b, int ldb, float* c, int ldc, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  openblas().sgemm(kColMajor, kNoTrans, transposed_b ? kTrans : kNoTrans, m, n, k, 1.f, a, lda, b,
                   ldb, accumulate ? 1.f : 0.f, c, ldc);
}

void openblas_product_tn(int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                         float* c, int ldc, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  openblas().sgemm(kColMajor, kTrans, kNoTrans, m, n, k, 1.f, a, lda, b, ldb,
                   accumulate ? 1.f : 0.f, c, ldc);
}

}  // namespace

GemmTnFn onednn_gemm_tn() { return onednn().sgemm != nullptr ? onednn_product_tn : nullptr; }
GemmTnFn openblas_gemm_tn() { return openblas().sgemm != nullptr ? openblas_product_tn : nullptr; }
GemmFn onednn_gemm() { return onednn().sgemm != nullptr ? onednn_product : nullptr; }
GemmFn openblas_gemm() { return openblas().sgemm != nullptr ? openblas_product : nullptr; }
const char* onednn_kernels() { return onednn().kernels.c_str(); }
const char* openblas_kernels() { return openblas().kernels.c_str(); }

}  // namespace gradsync::kernels
