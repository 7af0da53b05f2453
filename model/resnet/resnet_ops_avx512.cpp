// resnet_ops.inl compiled for the avx512 path (its flags: model/CMakeLists.txt).
#define GRADSYNC_RESNET_OPS_TABLE resnet_ops_avx512
#include "model/resnet/resnet_ops.inl"
