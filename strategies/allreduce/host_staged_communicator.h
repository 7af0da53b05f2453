// make_host_staged_communicator: the Communicator of allreduce/communicator.h on buffers in the
// memory of one CUDA device, over a communicator that reduces host buffers (TcpRing, Gloo).
// It is how several worker processes that share one GPU reduce: NCCL cannot put two ranks on
// one device, so their gradients meet in host memory (as PyTorch's gloo backend does with CUDA
// tensors).
//
//   CommunicatorOptions host = options;  host.device = -1;     // tcp or gloo, host buffers
//   auto comm = make_host_staged_communicator(make_communicator(store, rank, size, host),
//                                             model.device(), model_stream(model));
//   auto work = comm->allreduce_async(device_bucket, ReduceOp::kAvg);  // returns at once
//   work->wait(comm->timeout());              // the reduced values are on the device now
//
// Each collective, on this communicator's one staging thread, in issue order:
//   1. waits (on a copy stream of the device, by event) for the work enqueued on
//      `producer_stream` up to the moment the collective was issued: a bucket issued from the
//      model's gradient-ready callback is copied once its layer's kernels have run, while the
//      caller goes on with backward (model/cuda/cuda_mlp.h, "Streams and hand-off");
//   2. copies the device buffer into pinned host memory (reused from step to step, grown when
//      a collective needs more) and synchronises the copy stream;
//   3. runs the host communicator's collective on the pinned buffer and waits for it (its
//      timeout; its errors, such as a TimeoutError naming the late rank, pass unchanged);
//   4. copies the result back to the device and synchronises, then completes the Work: after
//      Work::wait the device buffer holds the result for any stream or the host.
// A null producer stream orders nothing: the buffers must be final when the call is made.
// allreduce_half and reduce_scatter_half stage their 16-bit values the same way (2 bytes each)
// and run the host communicator's; allgather_words is the allgather of the same bytes.
//
// Buffers: device (or managed) memory of `device`; anything else is refused at the call with
// gradsync::Error. They must stay valid and untouched until the Work completes. Zero elements
// pass through without copies.
//
// Failures: CUDA errors of the staging (naming the rank and the collective) and the host
// communicator's errors fail the Work; after one, every later call fails with the same error.
// abort() forwards to the host communicator, whose running collective then fails, and with it
// everything queued here. The destructor never waits on a peer: with collectives in flight it
// aborts the host communicator first; no copy into a device buffer happens after it returns.
//
// Threads: one thread issues and waits (the rank's), as with every Communicator; counters()
// and abort() from any thread. rank(), size(), timeout() and counters() are the host
// communicator's. Throws gradsync::Error in a build without CUDA.
#pragma once

#include <memory>

#include "allreduce/communicator.h"

struct CUstream_st;  // cudaStream_t's pointee, so this header needs no CUDA headers

namespace gradsync {

std::shared_ptr<Communicator> make_host_staged_communicator(std::shared_ptr<Communicator> host,
                                                            int device,
                                                            CUstream_st* producer_stream);

}  // namespace gradsync
