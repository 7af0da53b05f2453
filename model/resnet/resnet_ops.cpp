#include "model/resnet/resnet_ops.h"

#include "model/kernels/cpu_kernels.h"

namespace gradsync::resnet {

const ResnetOps& resnet_ops() {
#if defined(GRADSYNC_RESNET_X86_OPS)
  switch (cpu_path()) {
    case CpuPath::kAvx512:
      return resnet_ops_avx512();
    case CpuPath::kAvx2:
      return resnet_ops_avx2();
    case CpuPath::kPortable:
      break;
  }
#endif
  return resnet_ops_portable();
}

}  // namespace gradsync::resnet
