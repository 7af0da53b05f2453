// The optimizer for a model wherever it lives: Sgd in host memory, DeviceSgd on a GPU. Here in
// model/ rather than in model/optimizer/, since the device half needs CUDA, which the
// optimizer's own target (linked by the parameter-server shard) leaves out.
#pragma once

#include <cstddef>
#include <memory>

#include "model/optimizer/optimizer.h"
#include "model/optimizer/sgd_options.h"

namespace gradsync {

// SGD over `size` floats in host memory (device -1) or on CUDA device `device`. Throws
// gradsync::Error for a device in a build without CUDA.
std::unique_ptr<Optimizer> make_sgd(std::size_t size, const SgdOptions& options, int device);

}  // namespace gradsync
