// The elementwise parts of a step for the avx512 path: step_ops.inl compiled with this path's flags
// (model/kernels/CMakeLists.txt), its table joined to gemm_avx512.cpp's product.
#define GRADSYNC_KERNEL_TABLE avx512_table
#define GRADSYNC_KERNEL_GEMM gemm_avx512
#define GRADSYNC_KERNEL_PEAK peak_gflops_avx512
#define GRADSYNC_KERNEL_TRANSPOSE transpose_avx2
#include "model/kernels/step_ops.inl"
