// Compiled only when CMake finds MPI (GRADSYNC_HAVE_MPI); with mpi_runner.* and mpi_runtime.cpp,
// the only files that include mpi.h.
#include "allreduce/mpi/mpi_communicator.h"

#include <mpi.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <vector>

#include "allreduce/collective_checks.h"
#include "allreduce/collective_kind.h"
#include "allreduce/half_sum.h"
#include "allreduce/mpi/mpi_runner.h"
#include "allreduce/mpi/mpi_runtime.h"
#include "allreduce/tcp/work_queue.h"
#include "common/error.h"

namespace gradsync {
namespace {

using mpi::Header;
using Op = CollectiveKind;
using std::chrono::milliseconds;
using tcp::RingWork;

// MPI's user reductions for allreduce_half (MPI has no 16-bit float types): over MPI_UINT16_T,
// inout[i] = round16(float(in[i]) + float(inout[i])) (allreduce/half_sum.h). Commutative (an
// fp32 addition is, and so its rounding) though not associative: MPI may then pair the ranks in
// any order, as it may for MPI_FLOAT's sums.
void sum_fp16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* both = static_cast<std::uint16_t*>(inout);
  add_halves(HalfType::kFp16, both, static_cast<const std::uint16_t*>(in), both,
             static_cast<std::size_t>(*len));
}

void sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* both = static_cast<std::uint16_t*>(inout);
  add_halves(HalfType::kBf16, both, static_cast<const std::uint16_t*>(in), both,
             static_cast<std::size_t>(*len));
}

// The two MPI_Ops, made with the communicator and freed with it (unless MPI was finalised
// first, which frees them itself).
class HalfSumOps {
 public:
  HalfSumOps() {
    auto held = mpi::lock();
    mpi::check(MPI_Op_create(&sum_fp16, 1, &fp16_), "MPI_Op_create (fp16 sum)");
    mpi::check(MPI_Op_create(&sum_bf16, 1, &bf16_), "MPI_Op_create (bf16 sum)");
  }
  ~HalfSumOps() {
    try {
      auto held = mpi::lock();
      MPI_Op_free(&fp16_);
      MPI_Op_free(&bf16_);
    } catch (const std::exception&) {
      // MPI was finalised first: nothing left to free.
    }
  }
  HalfSumOps(const HalfSumOps&) = delete;
  HalfSumOps& operator=(const HalfSumOps&) = delete;

  MPI_Op sum(HalfType type) const { return type == HalfType::kFp16 ? fp16_ : bf16_; }

 private:
  MPI_Op fp16_ = MPI_OP_NULL;
  MPI_Op bf16_ = MPI_OP_NULL;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(Store& store, int rank, int size, const MpiOptions& options)
      : rank_(rank),
        size_(size),
        options_(options),
        me_("rank " + std::to_string(rank)),
        runner_(store, rank, size, options),
        queue_(rank, options.timeout, runner_.grace()) {}

  // A collective still running now ends the job (mpi_communicator.h). close() comes first, so
  // that the queue's thread, which may take the next collective before stop() tells it not to,
  // can start no MPI call: what was queued fails with "the communicator was destroyed".
  ~MpiCommunicator() override {
    runner_.close();
    queue_.stop();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  milliseconds timeout() const override { return options_.timeout; }

  std::shared_ptr<Work> allreduce_async(std::span<float> data, ReduceOp op) override {
    return allreduce_into_async(data, data, op);
  }

  std::shared_ptr<Work> allreduce_into_async(std::span<const float> in, std::span<float> data,
                                             ReduceOp op) override {
    check_allreduce_into_buffers(in.data(), in.size(), data.data(), data.size());
    const bool avg = op == ReduceOp::kAvg;
    const Header h{std::int64_t(avg ? Op::kAllreduceAvg : Op::kAllreduceSum), count(data.size())};
    const std::uint64_t moved = ring_share(data.size_bytes(), 2);
    return issue(h, moved, moved, [this, in, data, avg, moved](RingWork& work, const Header& mine) {
      const bool in_place = in.data() == data.data();
      if (size_ == 1) {
        if (!in_place && !data.empty()) std::memcpy(data.data(), in.data(), in.size_bytes());
        return;
      }
      if (data.empty()) return headers_only(work, mine);
      // MPI reads `in` itself out of place; its send buffer is const.
      const void* const send = in_place ? MPI_IN_PLACE : static_cast<const void*>(in.data());
      float* const buffer = data.data();
      const int n = int(data.size());
      const MPI_Comm comm = runner_.comm();
      runner_.run(work, mine, moved,
                  {"MPI_Allreduce",
                   [&] { return MPI_Allreduce(send, buffer, n, MPI_FLOAT, MPI_SUM, comm); },
                   "MPI_Iallreduce",
                   [&](MPI_Request* request) {
                     return MPI_Iallreduce(send, buffer, n, MPI_FLOAT, MPI_SUM, comm, request);
                   }});
      if (avg) divide(data);
    });
  }

  // MPI_Allreduce of MPI_UINT16_T with the format's user reduction (HalfSumOps), in place, 2
  // bytes an element; kAvg divides the finished 16-bit sum once, on every rank alike.
  std::shared_ptr<Work> allreduce_half_async(std::span<std::uint16_t> data, HalfType type,
                                             ReduceOp op) override {
    const bool avg = op == ReduceOp::kAvg;
    const Header h{std::int64_t(half_allreduce_kind(type, op)), count(data.size())};
    const std::uint64_t moved = ring_share(data.size_bytes(), 2);
    const MPI_Op sum = half_ops_.sum(type);
    return issue(
        h, moved, moved, [this, data, type, avg, moved, sum](RingWork& work, const Header& mine) {
          if (size_ == 1) return;
          if (data.empty()) return headers_only(work, mine);
          std::uint16_t* const buffer = data.data();
          const int n = int(data.size());
          const MPI_Comm comm = runner_.comm();
          runner_.run(
              work, mine, moved,
              {"MPI_Allreduce",
               [&] { return MPI_Allreduce(MPI_IN_PLACE, buffer, n, MPI_UINT16_T, sum, comm); },
               "MPI_Iallreduce",
               [&](MPI_Request* request) {
                 return MPI_Iallreduce(MPI_IN_PLACE, buffer, n, MPI_UINT16_T, sum, comm, request);
               }});
          if (avg) divide_halves(type, data.data(), data.size(), float(size_));
        });
  }

  std::shared_ptr<Work> broadcast_async(std::span<float> data, int root) override {
    GRADSYNC_CHECK(root >= 0 && root < size_, "broadcast root outside [0, size)");
    const Header h{std::int64_t(Op::kBroadcast), count(data.size()), root};
    const std::uint64_t bytes = size_ > 1 ? data.size_bytes() : 0;
    return issue(h, rank_ == root ? bytes : 0, rank_ == root ? 0 : bytes,
                 [this, data, root, bytes](RingWork& work, const Header& mine) {
                   if (size_ == 1) return;
                   if (data.empty()) return headers_only(work, mine);
                   float* const buffer = data.data();
                   const int n = int(data.size());
                   const MPI_Comm comm = runner_.comm();
                   runner_.run(
                       work, mine, bytes,
                       {"MPI_Bcast", [&] { return MPI_Bcast(buffer, n, MPI_FLOAT, root, comm); },
                        "MPI_Ibcast",
                        [&](MPI_Request* request) {
                          return MPI_Ibcast(buffer, n, MPI_FLOAT, root, comm, request);
                        }});
                 });
  }

  std::shared_ptr<Work> allgather_async(std::span<const float> in, std::span<float> out) override {
    GRADSYNC_CHECK(out.size() == in.size() * std::size_t(size_),
                   "allgather: out.size() must be size() * in.size()");
    count(in.size());  // MPI's count is the block: it must fit in an int
    const Header h{std::int64_t(Op::kAllgather), std::int64_t(out.size())};
    const std::uint64_t moved = ring_share(out.size_bytes(), 1);
    return issue(h, moved, moved, [this, in, out, moved](RingWork& work, const Header& mine) {
      const std::size_t m = in.size();
      if (size_ == 1) {
        if (m > 0) std::memmove(out.data(), in.data(), in.size_bytes());
        return;
      }
      if (m == 0) return headers_only(work, mine);
      // In place when the input already is this rank's block (MPI forbids other aliasing).
      const bool in_place = in.data() == out.data() + std::size_t(rank_) * m;
      const std::vector<float> copy = overlaps(in, out) && !in_place
                                          ? std::vector<float>(in.begin(), in.end())
                                          : std::vector<float>();
      const void* send = in_place ? MPI_IN_PLACE : copy.empty() ? in.data() : copy.data();
      const MPI_Comm comm = runner_.comm();
      runner_.run(work, mine, moved,
                  {"MPI_Allgather",
                   [&] {
                     return MPI_Allgather(send, int(m), MPI_FLOAT, out.data(), int(m), MPI_FLOAT,
                                          comm);
                   },
                   "MPI_Iallgather",
                   [&](MPI_Request* request) {
                     return MPI_Iallgather(send, int(m), MPI_FLOAT, out.data(), int(m), MPI_FLOAT,
                                           comm, request);
                   }});
    });
  }

  std::shared_ptr<Work> reduce_scatter_async(std::span<const float> in, std::span<float> out,
                                             ReduceOp op) override {
    GRADSYNC_CHECK(in.size() == out.size() * std::size_t(size_),
                   "reduce_scatter: in.size() must be size() * out.size(), but in has " +
                       std::to_string(in.size()) + " floats, out " + std::to_string(out.size()) +
                       ", over " + std::to_string(size_) + " ranks");
    const bool avg = op == ReduceOp::kAvg;
    count(out.size());  // MPI's count is the block: it must fit in an int
    const Header h{std::int64_t(avg ? Op::kReduceScatterAvg : Op::kReduceScatterSum),
                   std::int64_t(in.size())};
    const std::uint64_t moved = ring_share(in.size_bytes(), 1);
    return issue(h, moved, moved, [this, in, out, avg, moved](RingWork& work, const Header& mine) {
      if (size_ == 1) {
        if (!out.empty()) std::memmove(out.data(), in.data(), out.size_bytes());
        return;  // the average of one rank is its value: x / 1.0f == x
      }
      if (out.empty()) return headers_only(work, mine);
      const std::vector<float> copy =
          overlaps(in, out) ? std::vector<float>(in.begin(), in.end()) : std::vector<float>();
      const float* send = copy.empty() ? in.data() : copy.data();
      const int block = int(out.size());
      const MPI_Comm comm = runner_.comm();
      runner_.run(work, mine, moved,
                  {"MPI_Reduce_scatter_block",
                   [&] {
                     return MPI_Reduce_scatter_block(send, out.data(), block, MPI_FLOAT, MPI_SUM,
                                                     comm);
                   },
                   "MPI_Ireduce_scatter_block",
                   [&](MPI_Request* request) {
                     return MPI_Ireduce_scatter_block(send, out.data(), block, MPI_FLOAT, MPI_SUM,
                                                      comm, request);
                   }});
      if (avg) divide(out);
    });
  }

  // MPI_Reduce_scatter_block of MPI_UINT16_T with the format's user reduction (HalfSumOps), 2
  // bytes an element; kAvg divides the finished 16-bit block once, on every rank alike.
  std::shared_ptr<Work> reduce_scatter_half_async(std::span<const std::uint16_t> in,
                                                  std::span<std::uint16_t> out, HalfType type,
                                                  ReduceOp op) override {
    check_reduce_scatter_half_sizes(in.size(), out.size(), size_, type);
    const bool avg = op == ReduceOp::kAvg;
    count(out.size());  // MPI's count is the block: it must fit in an int
    const Header h{std::int64_t(half_reduce_scatter_kind(type, op)), std::int64_t(in.size())};
    const std::uint64_t moved = ring_share(in.size_bytes(), 1);
    const MPI_Op sum = half_ops_.sum(type);
    return issue(h, moved, moved,
                 [this, in, out, type, avg, moved, sum](RingWork& work, const Header& mine) {
                   if (size_ == 1) {
                     if (!out.empty()) std::memmove(out.data(), in.data(), out.size_bytes());
                     return;
                   }
                   if (out.empty()) return headers_only(work, mine);
                   const int block = int(out.size());
                   const MPI_Comm comm = runner_.comm();
                   runner_.run(work, mine, moved,
                               {"MPI_Reduce_scatter_block",
                                [&] {
                                  return MPI_Reduce_scatter_block(in.data(), out.data(), block,
                                                                  MPI_UINT16_T, sum, comm);
                                },
                                "MPI_Ireduce_scatter_block",
                                [&](MPI_Request* request) {
                                  return MPI_Ireduce_scatter_block(in.data(), out.data(), block,
                                                                   MPI_UINT16_T, sum, comm,
                                                                   request);
                                }});
                   if (avg) divide_halves(type, out.data(), out.size(), float(size_));
                 });
  }

  std::shared_ptr<Work> barrier_async() override {
    return issue(Header{std::int64_t(Op::kBarrier)}, 0, 0,
                 [this](RingWork& work, const Header& mine) {
                   if (size_ == 1) return;
                   const MPI_Comm comm = runner_.comm();
                   runner_.run(work, mine, 0,
                               {"MPI_Barrier", [&] { return MPI_Barrier(comm); }, "MPI_Ibarrier",
                                [&](MPI_Request* request) { return MPI_Ibarrier(comm, request); }});
                 });
  }

  // Bytes this rank moves in a bandwidth-optimal algorithm, the formulas NcclCommunicator and
  // GlooCommunicator count by: allreduce 2(N-1)/N of the buffer each way, allgather (N-1)/N of
  // the output, reduce_scatter (N-1)/N of the input, broadcast the buffer out of the root and
  // into every other rank, barrier nothing. The desync headers are not payload.
  std::string backend() const override { return "mpi"; }
  CommCounters counters() const override {
    return {bytes_sent_.load(), bytes_received_.load(), collectives_.load()};
  }

  void abort(const std::string& reason) override {
    if (aborted_.exchange(true)) return;
    runner_.abort(reason);
  }

 private:
  std::uint64_t ring_share(std::uint64_t bytes, int factor) const {
    return size_ <= 1
               ? 0
               : bytes * std::uint64_t(factor) * std::uint64_t(size_ - 1) / std::uint64_t(size_);
  }

  // MPI counts elements in an int.
  std::int64_t count(std::size_t n) const {
    if (n > std::size_t(INT_MAX)) {
      throw Error(me_ + ": mpi takes at most " + std::to_string(INT_MAX) +
                  " elements per collective (MPI counts in an int); this one has " +
                  std::to_string(n));
    }
    return std::int64_t(n);
  }

  static bool overlaps(std::span<const float> a, std::span<const float> b) {
    return !a.empty() && !b.empty() && a.data() < b.data() + b.size() &&
           b.data() < a.data() + a.size();
  }

  void divide(std::span<float> data) const {
    for (float& x : data) x /= float(size_);
  }

  // A collective of zero elements moves no payload, but its header still meets the others'
  // (check_desync), so that a rank that issued it where the others issued something else fails
  // now, in this collective, rather than pairing with their next one or timing out.
  void headers_only(RingWork& work, const Header& mine) { runner_.run(work, mine, 0, {}); }

  // Queues `body`; a collective that does not run (size 1) still takes its turn, so
  // that it completes in issue order and fails like any other call after a failure. A blocking
  // call with nothing queued runs on the caller's thread (WorkQueue::submit), as tcp's and
  // gloo's do: the two hand-offs between threads it saves cost 1 MiB allreduces at N = 2 about
  // a tenth of their speed against MPI_Allreduce called directly. MpiRunner::run is never
  // entered twice at once either way (the queue runs one task at a time, wherever).
  template <typename Body>
  std::shared_ptr<Work> issue(Header header, std::uint64_t sent, std::uint64_t received,
                              Body body) {
    return queue_.submit(
        mpi::describe_operation(header) + " (mpi)",
        [this, header, sent, received, body](RingWork& work) mutable {
          if (aborted_) throw Error(me_ + ": " + work.what() + ": aborted");
          header.seq = std::int64_t(work.seq());
          body(work, header);
          bytes_sent_ += sent;
          bytes_received_ += received;
          ++collectives_;
        },
        issuing_blocking_call());
  }

  const int rank_;
  const int size_;
  const MpiOptions options_;
  const std::string me_;  // "rank 3", for messages
  mpi::MpiRunner runner_;
  HalfSumOps half_ops_;  // after runner_: MPI runs by then
  std::atomic<bool> aborted_{false};
  std::atomic<std::uint64_t> bytes_sent_{0}, bytes_received_{0}, collectives_{0};
  tcp::WorkQueue queue_;  // last: its thread stops before the members above go
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(Store& store, int rank, int size,
                                                    const MpiOptions& options) {
  const mpi::World world = mpi::init_mpi_once();
  if (world.rank != rank || world.size != size) {
    throw Error("mpi: the launcher's environment makes this rank " + std::to_string(rank) + " of " +
                std::to_string(size) + ", MPI_COMM_WORLD makes it " + std::to_string(world.rank) +
                " of " + std::to_string(world.size) +
                ": start every rank with one mpirun (mpirun -np " + std::to_string(size) +
                " gradsync worker ...)");
  }
  return std::make_unique<MpiCommunicator>(store, rank, size, options);
}

std::string mpi_library_version() { return mpi::library_version(); }

}  // namespace gradsync
