#include "allreduce/shm/shm_communicator.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "allreduce/collective_checks.h"
#include "allreduce/collective_kind.h"
#include "allreduce/half_sum.h"
#include "allreduce/shm/shm_barrier.h"
#include "allreduce/shm/shm_layout.h"
#include "allreduce/shm/shm_segment.h"
#include "allreduce/shm/shm_sum.h"
#include "allreduce/tcp/work_queue.h"
#include "common/error.h"
#include "common/host_id.h"

namespace gradsync {
namespace {

using shm::Descriptor;
using shm::Header;
using shm::RankCell;
using shm::ShmLayout;
using shm::sum_slots;
using std::chrono::milliseconds;
using tcp::RingWork;

class ShmCommunicator final : public Communicator {
 public:
  ShmCommunicator(Store& store, int rank, int size, const ShmOptions& options)
      : rank_(rank),
        size_(size),
        options_(options),
        chunk_floats_(std::max<std::size_t>(options.chunk_bytes / sizeof(float), 64) / 64 * 64),
        grace_(std::min(options.timeout, milliseconds(1000))),
        // Spin before sleeping only when every rank can have a core.
        barrier_(rank, size, options.timeout,
                 (options.machine_ranks > 0 ? options.machine_ranks : size) <=
                     static_cast<int>(std::thread::hardware_concurrency())),
        queue_(rank, options.timeout, grace_) {
    if (size_ > 1) attach(store);
  }

  // A collective still waiting (its peers gone after a failure elsewhere) sees the close within
  // one sleep slice and fails: the queue's thread is joined without waiting out the timeout.
  ~ShmCommunicator() override {
    barrier_.close();
    queue_.stop();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  milliseconds timeout() const override { return options_.timeout; }

  std::shared_ptr<Work> allreduce_async(std::span<float> data, ReduceOp op) override {
    return allreduce_into_async(data, data, op);
  }

  std::shared_ptr<Work> allreduce_into_async(std::span<const float> in, std::span<float> out,
                                             ReduceOp op) override {
    check_allreduce_into_buffers(in.data(), in.size(), out.data(), out.size());
    const auto kind =
        op == ReduceOp::kAvg ? CollectiveKind::kAllreduceAvg : CollectiveKind::kAllreduceSum;
    return issue(kind, in.size(), 0,
                 [this, in, out, op] { run_allreduce(in, out, op == ReduceOp::kAvg); });
  }

  std::shared_ptr<Work> allreduce_half_async(std::span<std::uint16_t> data, HalfType type,
                                             ReduceOp op) override {
    return issue(half_allreduce_kind(type, op), data.size(), 0,
                 [this, data, type, op] { run_allreduce_half(data, type, op == ReduceOp::kAvg); });
  }

  std::shared_ptr<Work> broadcast_async(std::span<float> data, int root) override {
    GRADSYNC_CHECK(root >= 0 && root < size_, "broadcast root " + std::to_string(root) +
                                                  " is not a rank of " + std::to_string(size_));
    return issue(CollectiveKind::kBroadcast, data.size(), root,
                 [this, data, root] { run_broadcast(data, root); });
  }

  std::shared_ptr<Work> allgather_async(std::span<const float> in, std::span<float> out) override {
    GRADSYNC_CHECK(out.size() == in.size() * static_cast<std::size_t>(size_),
                   "allgather: out.size() must be size() * in.size()");
    return issue(CollectiveKind::kAllgather, out.size(), 0,
                 [this, in, out] { run_allgather(in, out); });
  }

  std::shared_ptr<Work> reduce_scatter_async(std::span<const float> in, std::span<float> out,
                                             ReduceOp op) override {
    check_reduce_scatter_sizes(in.size(), out.size(), size_);
    const auto kind = op == ReduceOp::kAvg ? CollectiveKind::kReduceScatterAvg
                                           : CollectiveKind::kReduceScatterSum;
    return issue(kind, in.size(), 0,
                 [this, in, out, op] { run_reduce_scatter(in, out, op == ReduceOp::kAvg); });
  }

  std::shared_ptr<Work> reduce_scatter_half_async(std::span<const std::uint16_t> in,
                                                  std::span<std::uint16_t> out, HalfType type,
                                                  ReduceOp op) override {
    check_reduce_scatter_half_sizes(in.size(), out.size(), size_, type);
    return issue(half_reduce_scatter_kind(type, op), in.size(), 0, [this, in, out, type, op] {
      run_reduce_scatter_half(in, out, type, op == ReduceOp::kAvg);
    });
  }

  std::shared_ptr<Work> barrier_async() override {
    return issue(CollectiveKind::kBarrier, std::size_t(size_), 0, [this] {
      begin();
      sync();
    });
  }

  std::string backend() const override { return "shm"; }
  CommCounters counters() const override {
    CommCounters c;
    c.bytes_sent = bytes_sent_.load();
    c.bytes_received = bytes_received_.load();
    c.collectives = collectives_.load();
    return c;
  }

  void abort(const std::string& reason) override {
    if (size_ > 1) barrier_.mark_aborted(reason, rank_);
    barrier_.close();
    queue_.stop();
  }

 private:
  // ---- set-up ---------------------------------------------------------------------------------

  void attach(Store& store) {
    const std::string prefix = options_.store_prefix + "/";
    const std::size_t bytes = ShmLayout::bytes(size_, chunk_floats_);
    const std::string host = this_host_id();
    store.set(prefix + "host/" + std::to_string(rank_), host);
    for (int r = 0; r < size_; ++r) {
      const std::string theirs = store.get(prefix + "host/" + std::to_string(r), options_.timeout);
      if (theirs != host) {
        throw PeerError(r, theirs, "shm set-up",
                        "comm.backend shm needs every rank on one host, and this rank is on " +
                            host + " (choose tcp, gloo or mpi across hosts)");
      }
    }
    if (rank_ == 0) {
      segment_ = ShmSegment::create(shm_segment_name(options_.run_id), bytes);
      layout_ = ShmLayout(segment_.data(), size_, chunk_floats_);
      auto* header = new (segment_.data()) Header{};
      header->ranks = static_cast<std::uint32_t>(size_);
      header->chunk_bytes = chunk_floats_ * sizeof(float);
      header->header_bytes = sizeof(Header);
      header->cell_bytes = sizeof(RankCell);
      for (int r = 0; r < size_; ++r) new (layout_.cell_address(r)) RankCell{};
      std::atomic_thread_fence(std::memory_order_release);
      header->magic = shm::kMagic;
      store.set(prefix + "name", segment_.name());
    } else {
      const std::string name = store.get(prefix + "name", options_.timeout);
      segment_ = ShmSegment::open(name, bytes);
      layout_ = ShmLayout(segment_.data(), size_, chunk_floats_);
      const Header& h = layout_.header();
      if (h.magic != shm::kMagic || h.ranks != std::uint32_t(size_) ||
          h.chunk_bytes != chunk_floats_ * sizeof(float) || h.header_bytes != sizeof(Header) ||
          h.cell_bytes != sizeof(RankCell)) {
        throw Error("shared memory " + name + ": made for " + std::to_string(h.ranks) +
                    " ranks and chunks of " + std::to_string(h.chunk_bytes) + " bytes, this rank " +
                    "expects " + std::to_string(size_) + " and " +
                    std::to_string(chunk_floats_ * sizeof(float)) + " (mixed builds or options?)");
      }
    }
    barrier_.attach(layout_);
    layout_.cell(rank_).pid.store(static_cast<std::int32_t>(::getpid()));
    store.set(prefix + "mapped/" + std::to_string(rank_), "1");
    if (rank_ == 0) {
      std::vector<std::string> keys;
      for (int r = 1; r < size_; ++r) keys.push_back(prefix + "mapped/" + std::to_string(r));
      store.wait(keys, options_.timeout);
      // Everyone has it mapped: the name can go, so no kill leaves a segment behind.
      segment_.unlink();
    }
  }

  // ---- layout ---------------------------------------------------------------------------------

  float* slot(int set, int r) const { return layout_.slot(set, r); }
  std::uint16_t* half_slot(int set, int r) const { return layout_.half_slot(set, r); }
  float* result(int set) const { return layout_.result(set); }
  int next_set() { return static_cast<int>(chunks_++ & 1u); }

  // ---- collectives ----------------------------------------------------------------------------

  template <typename Body>
  std::shared_ptr<Work> issue(CollectiveKind kind, std::size_t count, int root, Body body) {
    return queue_.submit(
        describe_collective(kind, count, root),
        [this, kind, count, root, body = std::move(body)](RingWork& work) mutable {
          current_ = Descriptor{work.seq(), count, std::uint32_t(kind), root};
          // One rank: the bodies only copy (an out-of-place allreduce, an allgather). An empty
          // collective still passes one barrier: the desync check's descriptors (by sequence
          // parity) rely on a barrier between collective s and s + 2, and a rank with 0 elements
          // where another has n must be caught.
          const bool barrier = kind == CollectiveKind::kBarrier;
          if (barrier ? size_ > 1 : count > 0) {
            body();
          } else if (size_ > 1) {
            begin();
            sync();
          }
          ++collectives_;
          if (size_ > 1) barrier_.finish(work.seq());
        },
        issuing_blocking_call());
  }

  // Says which collective this rank is in; the first sync() of it checks the others agree.
  void begin() { barrier_.begin(current_); }
  void sync() { barrier_.sync(); }

  void run_allreduce(std::span<const float> in, std::span<float> out, bool average) {
    if (size_ == 1) {
      if (in.data() != out.data()) std::memcpy(out.data(), in.data(), in.size() * sizeof(float));
      return;
    }
    begin();
    const std::size_t n = in.size();
    std::vector<const float*> slots(static_cast<std::size_t>(size_));
    for (std::size_t off = 0; off < n; off += chunk_floats_) {
      const std::size_t len = std::min(chunk_floats_, n - off);
      const int set = next_set();
      // Only this rank sums its own slice [b, e), so that part need not go through the segment:
      // it is read straight from `in`, and its sum written straight to `out` too. Every other
      // part goes in once and comes out once, as before; the sums are the same bits.
      const auto [b, e] = slice(len, rank_);
      float* mine = slot(set, rank_);
      std::memcpy(mine, in.data() + off, b * sizeof(float));
      std::memcpy(mine + e, in.data() + off + e, (len - e) * sizeof(float));
      sync();
      for (int r = 0; r < size_; ++r) slots[static_cast<std::size_t>(r)] = slot(set, r);
      slots[static_cast<std::size_t>(rank_)] = in.data() + off;
      sum_slots(result(set), slots, b, e, average ? float(size_) : 0.0f);
      // In place, `in` is `out`: its slice is overwritten only now, after the sum has read it.
      std::memcpy(out.data() + off + b, result(set) + b, (e - b) * sizeof(float));
      sync();
      std::memcpy(out.data() + off, result(set), b * sizeof(float));
      std::memcpy(out.data() + off + e, result(set) + e, (len - e) * sizeof(float));
      bytes_sent_ += (len + (e - b)) * sizeof(float);
      bytes_received_ += (len + (e - b) * static_cast<std::size_t>(size_ - 1)) * sizeof(float);
    }
  }

  // The allreduce's schedule on 16-bit values, a chunk holding twice as many: rank r sums slice
  // r of every slot in fp32, in rank order, and rounds once (sum_half_slots), so every element
  // is rounded once whichever rank sums it, and every rank copies out the same bits. kAvg
  // divides that 16-bit sum once, and rounds again, as the other backends divide theirs.
  void run_allreduce_half(std::span<std::uint16_t> data, HalfType type, bool average) {
    if (size_ == 1) return;  // one rank's sum is its own values, and so is their average
    begin();
    const std::size_t n = data.size();
    const std::size_t per_chunk = 2 * chunk_floats_;
    constexpr std::size_t kWidth = sizeof(std::uint16_t);
    std::vector<const std::uint16_t*> slots(static_cast<std::size_t>(size_));
    for (std::size_t off = 0; off < n; off += per_chunk) {
      const std::size_t len = std::min(per_chunk, n - off);
      const int set = next_set();
      std::memcpy(half_slot(set, rank_), data.data() + off, len * kWidth);
      sync();
      const auto [b, e] = slice(len, rank_, 64 / kWidth);
      for (int r = 0; r < size_; ++r) slots[static_cast<std::size_t>(r)] = half_slot(set, r) + b;
      std::uint16_t* result_half = reinterpret_cast<std::uint16_t*>(result(set));
      sum_half_slots(type, result_half + b, slots, e - b, average ? float(size_) : 0.0f);
      sync();
      std::memcpy(data.data() + off, result_half, len * kWidth);
      bytes_sent_ += (len + (e - b)) * kWidth;
      bytes_received_ += (len + (e - b) * static_cast<std::size_t>(size_ - 1)) * kWidth;
    }
  }

  void run_broadcast(std::span<float> data, int root) {
    if (size_ == 1) return;
    begin();
    for (std::size_t off = 0; off < data.size(); off += chunk_floats_) {
      const std::size_t len = std::min(chunk_floats_, data.size() - off);
      const int set = next_set();
      if (rank_ == root) std::memcpy(slot(set, root), data.data() + off, len * sizeof(float));
      sync();
      if (rank_ != root) std::memcpy(data.data() + off, slot(set, root), len * sizeof(float));
      (rank_ == root ? bytes_sent_ : bytes_received_) += len * sizeof(float);
    }
  }

  void run_allgather(std::span<const float> in, std::span<float> out) {
    if (size_ == 1) {
      std::memcpy(out.data(), in.data(), in.size() * sizeof(float));
      return;
    }
    begin();
    const std::size_t m = in.size();
    for (std::size_t off = 0; off < m; off += chunk_floats_) {
      const std::size_t len = std::min(chunk_floats_, m - off);
      const int set = next_set();
      std::memcpy(slot(set, rank_), in.data() + off, len * sizeof(float));
      sync();
      for (int r = 0; r < size_; ++r) {
        std::memcpy(out.data() + static_cast<std::size_t>(r) * m + off, slot(set, r),
                    len * sizeof(float));
      }
      bytes_sent_ += len * sizeof(float);
      bytes_received_ += len * static_cast<std::size_t>(size_ - 1) * sizeof(float);
    }
  }

  // Block r of `in` reduced into rank r's `out`: a slot holds the same stretch of every block,
  // and rank r sums its block's stretch over the slots straight into `out`.
  void run_reduce_scatter(std::span<const float> in, std::span<float> out, bool average) {
    if (size_ == 1) {
      std::memcpy(out.data(), in.data(), in.size() * sizeof(float));
      return;
    }
    begin();
    const std::size_t m = out.size();
    const std::size_t n = static_cast<std::size_t>(size_);
    const std::size_t stretch = std::max<std::size_t>(chunk_floats_ / n, 1);
    std::vector<const float*> slots(n);
    for (std::size_t off = 0; off < m; off += stretch) {
      const std::size_t len = std::min(stretch, m - off);
      const int set = next_set();
      float* mine = slot(set, rank_);
      for (std::size_t j = 0; j < n; ++j) {
        std::memcpy(mine + j * len, in.data() + j * m + off, len * sizeof(float));
      }
      sync();
      for (std::size_t r = 0; r < n; ++r) {
        slots[r] = slot(set, static_cast<int>(r)) + static_cast<std::size_t>(rank_) * len;
      }
      // sum_slots indexes from its begin: shift the output so index 0 lands at out[off].
      sum_slots(out.data() + off, slots, 0, len, average ? float(size_) : 0.0f);
      bytes_sent_ += n * len * sizeof(float);
      bytes_received_ += (n - 1) * len * sizeof(float);
    }
  }

  // The float reduce-scatter's schedule on 16-bit values, a slot holding twice as many: rank r
  // adds its block's stretch of every slot in fp32, in rank order, and rounds once
  // (sum_half_slots), the arithmetic of run_allreduce_half, so its block is that allreduce's
  // block bit for bit, exact sums or not. kAvg divides that 16-bit sum once, and rounds again.
  void run_reduce_scatter_half(std::span<const std::uint16_t> in, std::span<std::uint16_t> out,
                               HalfType type, bool average) {
    constexpr std::size_t kWidth = sizeof(std::uint16_t);
    if (size_ == 1) {
      std::memcpy(out.data(), in.data(), in.size() * kWidth);
      return;
    }
    begin();
    const std::size_t m = out.size();
    const std::size_t n = static_cast<std::size_t>(size_);
    const std::size_t stretch = std::max<std::size_t>(2 * chunk_floats_ / n, 1);
    std::vector<const std::uint16_t*> slots(n);
    for (std::size_t off = 0; off < m; off += stretch) {
      const std::size_t len = std::min(stretch, m - off);
      const int set = next_set();
      std::uint16_t* mine = half_slot(set, rank_);
      for (std::size_t j = 0; j < n; ++j) {
        std::memcpy(mine + j * len, in.data() + j * m + off, len * kWidth);
      }
      sync();
      for (std::size_t r = 0; r < n; ++r) {
        slots[r] = half_slot(set, static_cast<int>(r)) + static_cast<std::size_t>(rank_) * len;
      }
      sum_half_slots(type, out.data() + off, slots, len, average ? float(size_) : 0.0f);
      bytes_sent_ += n * len * kWidth;
      bytes_received_ += (n - 1) * len * kWidth;
    }
  }

  // Rank r's part of a chunk of `len` elements: cut at multiples of `per_line` elements (64-byte
  // lines: 16 floats, 32 16-bit values), so two ranks never write one cache line of the result.
  std::pair<std::size_t, std::size_t> slice(std::size_t len, int r,
                                            std::size_t per_line = 16) const {
    const std::size_t lines = (len + per_line - 1) / per_line;
    const auto cut = [&](int k) {
      return std::min(len, lines * static_cast<std::size_t>(k) / std::size_t(size_) * per_line);
    };
    return {cut(r), cut(r + 1)};
  }

  const int rank_;
  const int size_;
  const ShmOptions options_;
  const std::size_t chunk_floats_;
  const milliseconds grace_;
  shm::ShmBarrier barrier_;
  ShmSegment segment_;
  ShmLayout layout_;
  std::uint64_t chunks_ = 0;  // chunk steps so far: which set of slots is next
  Descriptor current_;
  std::atomic<std::uint64_t> bytes_sent_{0}, bytes_received_{0}, collectives_{0};
  tcp::WorkQueue queue_;  // last: its thread stops before the members above go
};

}  // namespace

std::unique_ptr<Communicator> make_shm_communicator(Store& store, int rank, int size,
                                                    const ShmOptions& options) {
  GRADSYNC_CHECK(size >= 1 && rank >= 0 && rank < size,
                 "shm: rank " + std::to_string(rank) + " of " + std::to_string(size));
  return std::make_unique<ShmCommunicator>(store, rank, size, options);
}

}  // namespace gradsync
