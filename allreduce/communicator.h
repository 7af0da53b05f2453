// Communicator: the collectives every multi-process strategy is built on (allreduce, broadcast,
// allgather, reduce-scatter, barrier).
//
//   auto comm = make_tcp_ring(store, rank, size, options);     // allreduce/tcp/tcp_ring.h
//   comm->allreduce(grads, ReduceOp::kAvg);                     // blocks until done
//   auto work = comm->allreduce_async(bucket, ReduceOp::kAvg);  // returns at once
//   ... more backward ...
//   work->wait(timeout);                                        // rethrows a failure
//   comm->reduce_scatter(grads, my_shard, ReduceOp::kAvg);      // ZeRO / FSDP: rank r gets block r
//   comm->allreduce_half(wire, HalfType::kFp16, ReduceOp::kSum); // 16-bit floats, 2 bytes each
//   comm->allgather_words(pairs, all_pairs);                     // raw 32-bit words, bit-exact
//   comm->reduce_scatter_half(wire, my_block, HalfType::kBf16, ReduceOp::kAvg);  // ZeRO, 16-bit
//
// Collectives run one at a time, in the order they were issued, on a background thread of the
// communicator (as a c10d ProcessGroup does); every rank must issue the same sequence of
// collectives with the same sizes. The buffers passed to an *_async call must stay valid and
// untouched until its Work is complete. World size 1 and zero elements are plain no-ops that
// complete at once.
//
// Failures: a collective that cannot finish within the communicator's timeout fails on every
// live rank with gradsync::TimeoutError naming the rank it waited for and, per rank, the last
// collective sequence number it started and finished; ranks that issue mismatched collectives
// (another operation, size or sequence) fail with a desync error naming both. After a failure
// the communicator is unusable: every later call throws the same error.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/error.h"
#include "common/stopwatch.h"

namespace gradsync {

enum class ReduceOp { kSum, kAvg };

// The 16-bit float formats allreduce_half reduces, as bit patterns in std::uint16_t:
// IEEE binary16 (1 sign, 5 exponent, 10 mantissa bits) and bfloat16 (fp32's top half).
enum class HalfType { kFp16, kBf16 };

// "fp16", "bf16".
inline const char* half_type_name(HalfType type) {
  return type == HalfType::kFp16 ? "fp16" : "bf16";
}

// When a collective really began and ended on its communicator's thread (after waiting its
// turn in the queue), for the trace; default-constructed where the backend cannot tell.
struct WorkTimes {
  Clock::time_point started{};
  Clock::time_point finished{};
  bool known() const { return finished != Clock::time_point{}; }
};

// Handle to an issued collective.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective completes; throws its error, or TimeoutError after `timeout`.
  virtual void wait(std::chrono::milliseconds timeout) = 0;
  virtual bool completed() const = 0;
  // Known once completed() on backends that run collectives on a thread of their own (tcp,
  // gloo, mpi); NCCL's run on the GPU, where the host does not see them start.
  virtual WorkTimes times() const { return {}; }
};

// Traffic counters of this rank since creation (payload bytes, not headers).
struct CommCounters {
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t collectives = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The deadline every wait of this communicator uses (configuration `comm.timeout_s`).
  virtual std::chrono::milliseconds timeout() const = 0;

  virtual std::shared_ptr<Work> allreduce_async(std::span<float> data, ReduceOp op) = 0;
  // Out of place, as ncclAllReduce(sendbuff, recvbuff) and MPI_Allreduce: out becomes the
  // reduction over ranks of in, and in is only read. in.size() == out.size(); in and out are
  // the same buffer (in place) or do not overlap. The result is the allreduce's, bit for bit:
  // the same sums in the same order. Each backend reads in where its schedule first needs it,
  // without copying it into out first.
  virtual std::shared_ptr<Work> allreduce_into_async(std::span<const float> in,
                                                     std::span<float> out, ReduceOp op) = 0;
  // data on `root` is sent to every rank; others' data is overwritten.
  virtual std::shared_ptr<Work> broadcast_async(std::span<float> data, int root) = 0;
  // out.size() == size() * in.size(); rank r's input lands at out[r * in.size()].
  virtual std::shared_ptr<Work> allgather_async(std::span<const float> in,
                                                std::span<float> out) = 0;
  // in.size() == size() * out.size(); rank r receives the reduction (op) over ranks of block r
  // of in, i.e. of in[r * out.size(), (r + 1) * out.size()). kAvg divides as this backend's
  // allreduce does, so where the sums are exact (integer-valued data) out is bitwise the
  // matching block of an allreduce of in; otherwise the backend may add the ranks in another
  // order than its allreduce does. in and out must not overlap. Sizes that disagree here throw
  // at the call; sizes that disagree across ranks fail like any mismatched collective.
  virtual std::shared_ptr<Work> reduce_scatter_async(std::span<const float> in,
                                                     std::span<float> out, ReduceOp op) = 0;
  virtual std::shared_ptr<Work> barrier_async() = 0;

  // All-reduce of 16-bit floats (`type`'s bit patterns, as common/compression/half_codec.h
  // writes them), in place, 16 bits a value on the wire: what DDP's fp16_compress_hook and
  // bf16_compress_hook send, half a float allreduce's bytes (the counters count 2 bytes a value).
  // Each addition is done in fp32 and rounded back to 16 bits (round to nearest even), as NCCL
  // sums half and bfloat16; shm sums every rank's value in fp32 and rounds once. The order of
  // the additions is the backend's, as for floats: integer-valued sums that every partial sum
  // can represent (fp16: |x| <= 2048, bf16: |x| <= 256) are exact everywhere, and every rank ends
  // with the same bits. kAvg divides the finished 16-bit sum by N once, in fp32, and rounds
  // again (NCCL: ncclAvg, its own pre-scaling). Overflow: an fp16 sum of magnitude 65520 or more
  // (halfway past 65504, the largest fp16) rounds to inf of its sign, and stays inf under kAvg;
  // divide before the sum to avoid it (half_codec's encode with a divisor, as DDP does). A NaN
  // stays a NaN (made quiet; its payload may change). A 16-bit allreduce never matches a float
  // allreduce or one of the other format: ranks that mix them fail with a desync error, as for any
  // mismatched collective. The default throws gradsync::Error naming backend(): every backend
  // gradsync ships overrides it (tcp, shm, gloo, mpi, nccl, hierarchical, host-staged); a default
  // rather than a pure virtual only so that a test's stand-in communicator need not. Buffers,
  // threads, timeouts and failures: as every other collective (the top of this file).
  virtual std::shared_ptr<Work> allreduce_half_async(std::span<std::uint16_t> data, HalfType type,
                                                     ReduceOp op);
  // Reduce-scatter of 16-bit floats: reduce_scatter_async's contract (in.size() == size() *
  // out.size(); rank r receives block r of the reduction; in is only read; in and out must not
  // overlap; sizes that disagree here throw at the call) with allreduce_half's arithmetic (each
  // addition in fp32 rounded back to 16 bits, shm's one rounding of every slot's fp32 sum; kAvg
  // divides the finished 16-bit sum by N once and rounds again; overflow and NaN as there).
  // 2 bytes a value on the wire, and counted so: a ring moves (N - 1) / N of in's bytes each way.
  // Where the sums are exact (integer-valued data within allreduce_half's bounds) block r is, bit
  // for bit, block r of an allreduce_half of in; otherwise the backend may add the ranks in
  // another order than its allreduce_half does (tcp and gloo from 3 ranks on; shm and the
  // hierarchical communicator always agree). What ZeRO with fp16 / bf16 compression sends: a
  // unit's gradient, each rank keeping its slice. A 16-bit reduce-scatter has a collective kind
  // per format and op: ranks that mix it with a float reduce-scatter, the other format or an
  // allreduce_half fail with a desync error. The default throws gradsync::Error naming backend(),
  // as allreduce_half's does (every backend gradsync ships overrides it).
  virtual std::shared_ptr<Work> reduce_scatter_half_async(std::span<const std::uint16_t> in,
                                                          std::span<std::uint16_t> out,
                                                          HalfType type, ReduceOp op);
  // Allgather of raw 32-bit words, bit for bit (top-k's (index, value bits) pairs; NaN patterns
  // arrive as sent): out.size() == size() * in.size(); rank r's words land at out[r * in.size()].
  // The default is allgather_async on the same bytes: every backend's float allgather moves bytes
  // without reading them as floats (tcp, shm, gloo and host-staged copy them, MPI_Allgather of
  // MPI_FLOAT in one homogeneous job and ncclAllGather copy them, the hierarchical communicator
  // gathers, never sums). On the wire it is therefore an allgather of as many floats: a rank in a
  // words allgather meets a rank in a float allgather of the same count without a desync error
  // (the bytes still arrive unchanged).
  virtual std::shared_ptr<Work> allgather_words_async(std::span<const std::uint32_t> in,
                                                      std::span<std::uint32_t> out);

  virtual CommCounters counters() const = 0;
  // comm.backend's name for what this is ("tcp", "shm", "gloo", "mpi", "nccl"): what a run's
  // summary reports, also where `auto` chose it.
  virtual std::string backend() const = 0;

  // This rank is leaving the run for a reason of its own (its data, its disk; not a failed
  // collective): tells the other ranks `reason` where the transport can, then fails what is
  // queued or running here and every later call. Never waits on a peer. TcpRing publishes the
  // reason through its Store, so that a neighbour's "closed the connection" names it; NCCL
  // aborts the communicator, so that nothing waits for the other ranks at destruction.
  virtual void abort(const std::string& reason) = 0;

  // Blocking forms: issue, then wait with timeout(). While one issues its call,
  // issuing_blocking_call() is true on the calling thread: an implementation whose collectives
  // run on a thread of its own may run this one on the caller's thread instead, when nothing
  // else is queued, and save the two hand-offs between threads (TcpRing and Gloo do).
  void allreduce(std::span<float> data, ReduceOp op) {
    wait_for(issue_blocking([&] { return allreduce_async(data, op); }));
  }
  void allreduce_into(std::span<const float> in, std::span<float> out, ReduceOp op) {
    wait_for(issue_blocking([&] { return allreduce_into_async(in, out, op); }));
  }
  void broadcast(std::span<float> data, int root) {
    wait_for(issue_blocking([&] { return broadcast_async(data, root); }));
  }
  void allgather(std::span<const float> in, std::span<float> out) {
    wait_for(issue_blocking([&] { return allgather_async(in, out); }));
  }
  void reduce_scatter(std::span<const float> in, std::span<float> out, ReduceOp op) {
    wait_for(issue_blocking([&] { return reduce_scatter_async(in, out, op); }));
  }
  void barrier() {
    wait_for(issue_blocking([&] { return barrier_async(); }));
  }
  void allreduce_half(std::span<std::uint16_t> data, HalfType type, ReduceOp op) {
    wait_for(issue_blocking([&] { return allreduce_half_async(data, type, op); }));
  }
  void allgather_words(std::span<const std::uint32_t> in, std::span<std::uint32_t> out) {
    wait_for(issue_blocking([&] { return allgather_words_async(in, out); }));
  }
  void reduce_scatter_half(std::span<const std::uint16_t> in, std::span<std::uint16_t> out,
                           HalfType type, ReduceOp op) {
    wait_for(issue_blocking([&] { return reduce_scatter_half_async(in, out, type, op); }));
  }

 protected:
  static bool issuing_blocking_call() { return blocking_call_flag(); }

 private:
  static bool& blocking_call_flag() {
    thread_local bool flag = false;
    return flag;
  }
  template <typename Issue>
  static std::shared_ptr<Work> issue_blocking(Issue issue) {
    struct Scope {
      bool before = blocking_call_flag();
      Scope() { blocking_call_flag() = true; }
      ~Scope() { blocking_call_flag() = before; }
    } scope;
    return issue();
  }
  void wait_for(const std::shared_ptr<Work>& work) { work->wait(timeout()); }
};

inline std::shared_ptr<Work> Communicator::allreduce_half_async(std::span<std::uint16_t> data,
                                                                HalfType type, ReduceOp) {
  throw Error("allreduce_half: the " + backend() + " communicator has no 16-bit allreduce (" +
              half_type_name(type) + ", " + std::to_string(data.size()) + " values)");
}

inline std::shared_ptr<Work> Communicator::reduce_scatter_half_async(
    std::span<const std::uint16_t> in, std::span<std::uint16_t>, HalfType type, ReduceOp) {
  throw Error("reduce_scatter_half: the " + backend() + " communicator has no 16-bit " +
              "reduce-scatter (" + half_type_name(type) + ", " + std::to_string(in.size()) +
              " values)");
}

inline std::shared_ptr<Work> Communicator::allgather_words_async(std::span<const std::uint32_t> in,
                                                                 std::span<std::uint32_t> out) {
  static_assert(sizeof(float) == sizeof(std::uint32_t));
  // Only the bytes move (see the declaration): no backend reads these as floats.
  return allgather_async({reinterpret_cast<const float*>(in.data()), in.size()},
                         {reinterpret_cast<float*>(out.data()), out.size()});
}

}  // namespace gradsync
