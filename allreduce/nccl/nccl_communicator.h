// NcclCommunicator: the Communicator of allreduce/communicator.h over NCCL, on buffers in the
// memory of one CUDA device (one rank per GPU; ranks sharing a GPU cannot form a communicator).
//
//   NcclOptions options;  options.device = local_rank;  options.timeout = comm_timeout;
//   auto comm = NcclCommunicator::create(store, rank, world, options);   // collective
//   comm->set_producer_stream(model_stream);            // collectives wait for the model's work
//   auto work = comm->allreduce_async(device_bucket, ReduceOp::kAvg);   // returns at once
//   work->wait(comm->timeout());
//
// Rendezvous: rank 0 creates the ncclUniqueId and sets it in the Store under
// "<store_prefix>/unique_id"; the others get it (the same Store TcpRing uses, allreduce/store.h).
// The communicator is created non-blocking and joined with a deadline, so a rank that never
// arrives is a TimeoutError, not a hang.
//
// Streams: every collective runs on this communicator's own stream, in issue order. With a
// producer stream set, each collective first waits (cudaStreamWaitEvent, no host wait) for the
// work enqueued on the producer up to the moment it is issued: that is how a bucket reduction
// issued from the model's gradient-ready callback starts after that layer's kernels, while
// backward goes on. Work::wait polls the collective's completion event against the deadline.
//
// Failures: NCCL cannot say which rank is late. A wait past the timeout aborts the communicator
// (ncclCommAbort) and throws TimeoutError naming the collective and its sequence number; an
// asynchronous NCCL error does the same with gradsync::Error. After either, every call throws
// that error again. The destructor never waits on a peer: with work still in flight it aborts.
//
// Buffers: device memory of options.device (cudaMalloc or managed); a host pointer is refused
// with gradsync::Error. They must stay valid until the Work completes. World size 1 runs the
// collectives through NCCL too (a copy at most); zero elements complete at once.
// Threads: one thread issues and waits (the rank's), as with every Communicator.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "allreduce/communicator.h"
#include "allreduce/store.h"

namespace gradsync {
namespace nccl {
struct State;  // nccl_state.h: shared with the Work handles, which may outlive an issue
}

struct NcclOptions {
  int device = 0;
  std::chrono::milliseconds timeout{60000};
  std::string store_prefix = "nccl";  // several communicators can share one Store
};

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `size` ranks: each calls it with its own rank. Blocks until all have joined
  // (bounded by options.timeout).
  static std::unique_ptr<NcclCommunicator> create(Store& store, int rank, int size,
                                                  const NcclOptions& options);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  std::chrono::milliseconds timeout() const override;

  std::shared_ptr<Work> allreduce_async(std::span<float> data, ReduceOp op) override;
  std::shared_ptr<Work> allreduce_into_async(std::span<const float> in, std::span<float> out,
                                             ReduceOp op) override;
  std::shared_ptr<Work> broadcast_async(std::span<float> data, int root) override;
  std::shared_ptr<Work> allgather_async(std::span<const float> in, std::span<float> out) override;
  // ncclReduceScatter; kAvg is ncclAvg, as in allreduce_async.
  std::shared_ptr<Work> reduce_scatter_async(std::span<const float> in, std::span<float> out,
                                             ReduceOp op) override;
  std::shared_ptr<Work> barrier_async() override;
  // ncclAllReduce of ncclHalf or ncclBfloat16, in place, on device memory: NCCL adds in fp32
  // and rounds each partial sum to 16 bits; kAvg is ncclAvg, which for floating types scales
  // each rank's values by 1/N before the sum (so, unlike the CPU backends, an fp16 average whose
  // sum would overflow need not). Bits agree with the CPU backends' where the sums are exact.
  std::shared_ptr<Work> allreduce_half_async(std::span<std::uint16_t> data, HalfType type,
                                             ReduceOp op) override;
  // ncclReduceScatter of ncclHalf or ncclBfloat16 on device memory, NCCL's arithmetic as in
  // allreduce_half_async (kAvg is ncclAvg); bits agree with the CPU backends' where the sums
  // are exact and, for kAvg, where dividing by N is exact too.
  std::shared_ptr<Work> reduce_scatter_half_async(std::span<const std::uint16_t> in,
                                                  std::span<std::uint16_t> out, HalfType type,
                                                  ReduceOp op) override;
  // In place; only `root` receives the reduction (DataParallel's gather onto device 0).
  std::shared_ptr<Work> reduce_async(std::span<float> data, ReduceOp op, int root);
  void reduce(std::span<float> data, ReduceOp op, int root) {
    reduce_async(data, op, root)->wait(timeout());
  }

  // Bytes this rank moves in a bandwidth-optimal algorithm (NCCL's rings move this much):
  // allreduce 2(N-1)/N * S each way, allgather (N-1)/N of the output, reduce-scatter (N-1)/N of
  // the input, broadcast S out of the root and S into every other rank, reduce S out of every
  // non-root and (N-1)S into the root.
  CommCounters counters() const override;
  std::string backend() const override { return "nccl"; }

  // Collectives issued from now on first wait for the work enqueued on `producer` when they are
  // issued. Null: no ordering beyond this communicator's own stream. The stream must belong to
  // this communicator's device and outlive it (or be reset to null first).
  void set_producer_stream(cudaStream_t producer);
  cudaStream_t stream() const;
  int device() const;

  // Aborts the communicator now (ncclCommAbort: kernels stuck on a peer are released, nothing
  // waits for the other ranks); every later call throws `reason`. For a failure elsewhere in
  // the run: destroying an idle communicator instead would finalise it, which waits for peers.
  // Like every other call, only from the rank's own thread, never while it waits.
  void abort(const std::string& reason) override;

  // "2.28.9": the NCCL library this process loaded.
  static std::string version();

 private:
  explicit NcclCommunicator(std::shared_ptr<nccl::State> state);
  // The common path of every collective: failure check, producer ordering, the NCCL call,
  // its completion event, the counters.
  // `elements` names what count counts, for messages ("floats", "fp16 values").
  std::shared_ptr<Work> issue(const char* operation, std::size_t count, std::uint64_t bytes_sent,
                              std::uint64_t bytes_received,
                              const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& call,
                              const char* elements = "floats");

  std::shared_ptr<nccl::State> state_;
};

}  // namespace gradsync
