// The elementwise parts of a step for the portable path: step_ops.inl compiled with this path's
// flags (model/kernels/CMakeLists.txt), its table joined to gemm_portable.cpp's product.
#define GRADSYNC_KERNEL_TABLE portable_table
#define GRADSYNC_KERNEL_GEMM gemm_portable
#define GRADSYNC_KERNEL_PEAK peak_gflops_portable
#include "model/kernels/step_ops.inl"
