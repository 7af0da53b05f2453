// resnet_ops.inl compiled for the avx2 path (its flags: model/CMakeLists.txt).
#define GRADSYNC_RESNET_OPS_TABLE resnet_ops_avx2
#include "model/resnet/resnet_ops.inl"
