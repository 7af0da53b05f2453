// make_model_communicator: the communicator a worker process's `allreduce` strategy needs for
// the model it trains, of the backend options.backend names (comm.backend; auto: TcpRing for a
// model in host memory, NcclCommunicator on the model's device for a GPU model, ordered after
// the model's stream so that bucket reductions issued from its gradient-ready callback start
// right after that layer's kernels: allreduce/make_communicator.h, model/cuda/cuda_mlp.h).
// A GPU model with tcp, gloo or mpi reduces through pinned host memory: that host communicator,
// wrapped by host_staged_communicator.h (ordered after the model's stream the same way); it is
// how ranks that share one GPU train, since NCCL takes one rank per GPU.
//
//   CommunicatorOptions options;  options.backend = "gloo";  options.tcp = ring_options;
//   comm = make_model_communicator(*store, env.rank, env.world_size, options, *model);
//
// Collective: every rank calls it. The model must outlive the communicator (its stream is
// used by every collective); the Store too.
#pragma once

#include <memory>

#include "allreduce/communicator.h"
#include "allreduce/make_communicator.h"
#include "allreduce/store.h"
#include "model/model.h"

namespace gradsync {

// options.device and options.producer_stream come from the model.
std::shared_ptr<Communicator> make_model_communicator(Store& store, int rank, int size,
                                                      CommunicatorOptions options, Model& model);

}  // namespace gradsync
