#include "strategies/allreduce/model_communicator.h"

#ifdef GRADSYNC_HAVE_CUDA
#include "model/cuda/cuda_mlp.h"
#endif

namespace gradsync {

std::shared_ptr<Communicator> make_model_communicator(Store& store, int rank, int size,
                                                      CommunicatorOptions options, Model& model) {
  options.device = model.device();
#ifdef GRADSYNC_HAVE_CUDA
  options.producer_stream = model_stream(model);
#endif
  return make_communicator(store, rank, size, options);
}

}  // namespace gradsync
