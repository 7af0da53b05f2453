#include "model/make_optimizer.h"

#include <string>

#include "common/error.h"
#include "model/optimizer/sgd.h"
#ifdef GRADSYNC_HAVE_CUDA
#include "model/cuda/device_sgd.h"
#endif

namespace gradsync {

std::unique_ptr<Optimizer> make_sgd(std::size_t size, const SgdOptions& options, int device) {
  if (device < 0) return std::make_unique<Sgd>(size, options);
#ifdef GRADSYNC_HAVE_CUDA
  return make_device_sgd(size, options, device);
#else
  throw Error("SGD on CUDA device " + std::to_string(device) +
              ": this gradsync was built without CUDA");
#endif
}

}  // namespace gradsync
