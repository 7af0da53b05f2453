// The products from the libraries that beat gradsync's own kernels on the MLP's shapes, measured
// by bench/micro/gemm_candidates.cpp (docs/cpu-kernels.md): oneDNN on the AVX-512 path, OpenBLAS
// (serial) on the AVX2 path. Each is loaded on first use with dlopen, so the binary needs neither
// to run: where one is not installed, its loader returns null and the path keeps its own kernel.
// Same contract as gemm_kernels.h. Internal to model/kernels/.
#pragma once

namespace gradsync::kernels {

using GemmFn = void (*)(bool transposed_b, int m, int n, int k, const float* a, int lda,
                        const float* b, int ldb, float* c, int ldc, bool accumulate);

using GemmTnFn = void (*)(int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                          float* c, int ldc, bool accumulate);

// libdnnl.so.2's dnnl_sgemm on one thread per calling thread; null where it is not installed.
GemmFn onednn_gemm();
// OpenBLAS's cblas_sgemm (Debian's libopenblas0-serial), held to its Haswell (AVX2) kernels on a
// CPU that has AVX-512, so that the avx2 path measures AVX2; null where it is not installed.
GemmFn openblas_gemm();
// What the library says it runs: "Haswell", "Zen", ... for OpenBLAS; oneDNN's instruction set.
// Their C = A^T B, A taken as it lies; null where the library is not installed.
GemmTnFn onednn_gemm_tn();
GemmTnFn openblas_gemm_tn();
const char* onednn_kernels();
const char* openblas_kernels();

}  // namespace gradsync::kernels
