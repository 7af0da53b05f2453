// resnet_ops.inl compiled for the portable path (its flags: model/CMakeLists.txt).
#define GRADSYNC_RESNET_OPS_TABLE resnet_ops_portable
#include "model/resnet/resnet_ops.inl"
