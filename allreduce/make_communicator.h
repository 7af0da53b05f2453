// make_communicator: the Communicator for where a rank's buffers live. Host memory (device -1)
// gets TcpRing; a CUDA device gets NcclCommunicator on that device, ordered after
// `producer_stream` (the model's stream, so bucket reductions start after their layer's
// gradient kernels; see allreduce/nccl/nccl_communicator.h).
//
//   CommunicatorOptions options;
//   options.tcp = ring_options;            // timeout and store prefix are shared by both
//   options.device = model.device();
//   options.producer_stream = model_stream(model);        // model/cuda/cuda_mlp.h; may be null
//   std::shared_ptr<Communicator> comm = make_communicator(store, rank, world, options);
//
// Collective: every rank calls it. Throws gradsync::Error for a device in a build without NCCL,
// naming the device. The Store must outlive the communicator.
#pragma once

#include <memory>

#include "allreduce/communicator.h"
#include "allreduce/store.h"
#include "allreduce/tcp/tcp_ring.h"

struct CUstream_st;  // cudaStream_t's pointee, so this header needs no CUDA headers

namespace gradsync {

struct CommunicatorOptions {
  TcpRingOptions tcp;                      // timeout for both; the rest for TcpRing only
  int device = -1;                         // -1: host buffers (TcpRing); else CUDA ordinal (NCCL)
  CUstream_st* producer_stream = nullptr;  // NCCL: collectives wait for this stream's work
};

std::shared_ptr<Communicator> make_communicator(Store& store, int rank, int size,
                                                const CommunicatorOptions& options);

// True in a build with the NCCL communicator (GRADSYNC_HAVE_NCCL).
bool nccl_compiled_in();

}  // namespace gradsync
