#include "strategies/allreduce/model_communicator.h"

#include "strategies/allreduce/host_staged_communicator.h"
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
  if (options.device >= 0 &&
      (options.backend == "tcp" || options.backend == "gloo" || options.backend == "mpi")) {
    // A GPU model over a host backend: the ranks may share one GPU, which NCCL cannot do, so
    // the buckets go through pinned host memory, ordered after the model's stream.
    CommunicatorOptions host = options;
    host.device = -1;
    host.producer_stream = nullptr;
    return make_host_staged_communicator(make_communicator(store, rank, size, host), options.device,
                                         options.producer_stream);
  }
  return make_communicator(store, rank, size, options);
}

}  // namespace gradsync
