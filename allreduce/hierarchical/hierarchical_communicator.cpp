#include "allreduce/hierarchical/hierarchical_communicator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "allreduce/collective_checks.h"
#include "allreduce/half_sum.h"
#include "allreduce/tcp/work_queue.h"
#include "common/error.h"

namespace gradsync {
namespace {

using std::chrono::milliseconds;
using tcp::RingWork;

// A level's error names its peer by the level's own rank ("rank 1 (...) during ..."): the same
// error, naming the global rank and the level instead. Anything else passes unchanged.
[[noreturn]] void rethrow_naming_global_rank(std::exception_ptr error,
                                             const std::vector<int>& global_of,
                                             const std::string& level) {
  try {
    std::rethrow_exception(error);
  } catch (const PeerError& e) {
    const int local = e.rank();
    const std::string prefix = "rank " + std::to_string(local) + " ";
    const std::string message = e.what();
    if (local < 0 || local >= static_cast<int>(global_of.size()) || !message.starts_with(prefix)) {
      throw;
    }
    const int global = global_of[local];
    // "rank 3 (" + endpoint ... : PeerError's constructor adds the "rank N (" back.
    const std::size_t open = message.find('(');
    const std::size_t close = message.find(") during ");
    if (open == std::string::npos || close == std::string::npos) throw;
    const std::string endpoint = message.substr(open + 1, close - open - 1) + ", " + level;
    const std::string rest = message.substr(close + 9);  // "<operation>: <problem>"
    const std::size_t colon = rest.find(": ");
    const std::string operation = rest.substr(0, colon);
    const std::string problem = colon == std::string::npos ? "" : rest.substr(colon + 2);
    if (dynamic_cast<const TimeoutError*>(&e) != nullptr) {
      throw TimeoutError(global, endpoint, operation, problem);
    }
    throw PeerError(global, endpoint, operation, problem);
  }
}

class HierarchicalCommunicator final : public Communicator {
 public:
  HierarchicalCommunicator(int rank, HostLayout layout, HierarchyLevels levels)
      : rank_(rank),
        size_(static_cast<int>(layout.host_of_rank.size())),
        layout_(std::move(layout)),
        intra_(std::move(levels.in_host)),
        after_(std::move(levels.from_leader)),
        inter_(std::move(levels.between_hosts)),
        timeout_(std::max(intra_->timeout(), after_->timeout())),
        queue_(rank, timeout_, std::min(intra_->timeout() / 2, milliseconds(2000))) {
    for (const Communicator* host : {intra_.get(), after_.get()}) {
      GRADSYNC_CHECK(host->size() == layout_.local_size() && host->rank() == layout_.local_rank,
                     "hierarchical: the host's communicators must span the host's ranks");
    }
    GRADSYNC_CHECK(!inter_ || (layout_.leader() && inter_->size() == layout_.hosts &&
                               inter_->rank() == layout_.host),
                   "hierarchical: the leaders' communicator must span one rank per host");
    GRADSYNC_CHECK(inter_ || !layout_.leader() || layout_.hosts == 1,
                   "hierarchical: a leader needs the leaders' communicator");
  }

  ~HierarchicalCommunicator() override {
    // A level still waiting on a peer that is gone fails once it is aborted: the queue's thread
    // is then joined without waiting out the timeout.
    if (!queue_.settled()) abort_levels("communicator destroyed");
    queue_.stop();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  milliseconds timeout() const override { return timeout_; }

  std::shared_ptr<Work> allreduce_async(std::span<float> data, ReduceOp op) override {
    return allreduce_into_async(data, data, op);
  }

  std::shared_ptr<Work> allreduce_into_async(std::span<const float> in, std::span<float> out,
                                             ReduceOp op) override {
    check_allreduce_into_buffers(in.data(), in.size(), out.data(), out.size());
    return issue("allreduce of " + std::to_string(in.size()) + " floats",
                 [this, in, out, op] { run_allreduce(in, out, op); });
  }

  std::shared_ptr<Work> allreduce_half_async(std::span<std::uint16_t> data, HalfType type,
                                             ReduceOp op) override {
    return issue(std::string("allreduce ") + half_type_name(type) + " of " +
                     std::to_string(data.size()) + " values",
                 [this, data, type, op] { run_allreduce_half(data, type, op); });
  }

  std::shared_ptr<Work> broadcast_async(std::span<float> data, int root) override {
    GRADSYNC_CHECK(root >= 0 && root < size_, "broadcast root " + std::to_string(root) +
                                                  " is not a rank of " + std::to_string(size_));
    return issue(
        "broadcast of " + std::to_string(data.size()) + " floats from rank " + std::to_string(root),
        [this, data, root] { run_broadcast(data, root); });
  }

  std::shared_ptr<Work> allgather_async(std::span<const float> in, std::span<float> out) override {
    GRADSYNC_CHECK(out.size() == in.size() * static_cast<std::size_t>(size_),
                   "allgather: out.size() must be size() * in.size()");
    return issue("allgather of " + std::to_string(out.size()) + " floats",
                 [this, in, out] { run_allgather(in, out); });
  }

  std::shared_ptr<Work> reduce_scatter_async(std::span<const float> in, std::span<float> out,
                                             ReduceOp op) override {
    check_reduce_scatter_sizes(in.size(), out.size(), size_);
    return issue("reduce-scatter of " + std::to_string(in.size()) + " floats", [this, in, out, op] {
      std::vector<float> whole(in.size());
      run_allreduce(in, whole, op);
      const std::size_t n = out.size();
      std::copy_n(whole.begin() + static_cast<std::ptrdiff_t>(n * rank_), n, out.begin());
    });
  }

  // As the float reduce-scatter: the allreduce_half of a copy of in, then this rank's block, so
  // every block is the allreduce_half's bit for bit (at the all-reduce's cost).
  std::shared_ptr<Work> reduce_scatter_half_async(std::span<const std::uint16_t> in,
                                                  std::span<std::uint16_t> out, HalfType type,
                                                  ReduceOp op) override {
    check_reduce_scatter_half_sizes(in.size(), out.size(), size_, type);
    return issue(std::string("reduce-scatter ") + half_type_name(type) + " of " +
                     std::to_string(in.size()) + " values",
                 [this, in, out, type, op] {
                   std::vector<std::uint16_t> whole(in.begin(), in.end());
                   run_allreduce_half(whole, type, op);
                   const std::size_t n = out.size();
                   std::copy_n(whole.begin() + static_cast<std::ptrdiff_t>(n * rank_), n,
                               out.begin());
                 });
  }

  std::shared_ptr<Work> barrier_async() override {
    return issue("barrier", [this] {
      in_host([&] { intra_->barrier(); });
      among_leaders([&] { inter_->barrier(); });
      from_leader([&] { after_->barrier(); });
    });
  }

  CommCounters counters() const override {
    CommCounters c;
    for (const Communicator* level : {intra_.get(), after_.get(), inter_.get()}) {
      if (level == nullptr) continue;
      const CommCounters counted = level->counters();
      c.bytes_sent += counted.bytes_sent;
      c.bytes_received += counted.bytes_received;
    }
    c.collectives = collectives_.load();
    return c;
  }

  std::string backend() const override {
    return intra_->backend() + "+" + (inter_ ? inter_->backend() : std::string("leaders"));
  }

  void abort(const std::string& reason) override {
    abort_levels(reason);
    queue_.stop();
  }

 private:
  template <typename Body>
  std::shared_ptr<Work> issue(const std::string& description, Body body) {
    return queue_.submit(
        description,
        [this, body = std::move(body)](RingWork&) mutable {
          body();
          ++collectives_;
        },
        issuing_blocking_call());
  }

  // A step within this host, before the leaders' (intra_, the level's own timeout).
  template <typename Step>
  void in_host(Step step) {
    if (layout_.local_size() > 1) run_level(step, layout_.ranks_of_host[layout_.host], "host");
  }

  // A step among the leaders (on leaders, where there are several hosts).
  template <typename Step>
  void among_leaders(Step step) {
    if (!inter_) return;
    std::vector<int> leaders;
    for (const std::vector<int>& ranks : layout_.ranks_of_host) leaders.push_back(ranks.front());
    run_level(step, leaders, "between hosts");
  }

  // A step within this host that waits for the leader's step among the leaders (after_, whose
  // timeout allows for the steps before it).
  template <typename Step>
  void from_leader(Step step) {
    if (layout_.hosts > 1) in_host(step);
  }

  // On failure every other level is aborted with the reason, so that the ranks waiting there
  // (this host's for their leader, the other hosts' for this one) fail with it at once; the
  // error names the global rank.
  template <typename Step>
  void run_level(Step& step, const std::vector<int>& global_of, const std::string& level) {
    try {
      step();
    } catch (...) {
      std::exception_ptr error = std::current_exception();
      const std::string where = level == "host" ? "host " + std::to_string(layout_.host) : level;
      try {
        rethrow_naming_global_rank(error, global_of, where);
      } catch (const std::exception& named) {
        abort_levels(named.what());
        throw;
      }
    }
  }

  void abort_levels(const std::string& reason) {
    for (Communicator* level : {intra_.get(), after_.get(), inter_.get()}) {
      if (level != nullptr && level->size() > 1) level->abort(reason);
    }
  }

  void run_allreduce(std::span<const float> in, std::span<float> out, ReduceOp op) {
    if (layout_.local_size() > 1) {
      in_host([&] { intra_->allreduce_into(in, out, ReduceOp::kSum); });
    } else if (in.data() != out.data()) {
      std::copy(in.begin(), in.end(), out.begin());
    }
    if (layout_.hosts > 1) {
      among_leaders([&] { inter_->allreduce(out, ReduceOp::kSum); });
      from_leader([&] { after_->broadcast(out, 0); });
    }
    if (op == ReduceOp::kAvg) {
      const float n = static_cast<float>(size_);
      for (float& x : out) x /= n;
    }
  }

  // The allreduce's three levels on 16-bit values: each level's allreduce_half sums (its own
  // rounding rule: shm rounds a host's sum once, the leaders' ring at each addition), and the
  // leader's result reaches its host as bytes (broadcast_halves). kAvg divides the finished
  // 16-bit sum once, on every rank alike.
  void run_allreduce_half(std::span<std::uint16_t> data, HalfType type, ReduceOp op) {
    if (layout_.local_size() > 1) {
      in_host([&] { intra_->allreduce_half(data, type, ReduceOp::kSum); });
    }
    if (layout_.hosts > 1) {
      among_leaders([&] { inter_->allreduce_half(data, type, ReduceOp::kSum); });
      broadcast_halves(data);
    }
    if (op == ReduceOp::kAvg && size_ > 1) {
      divide_halves(type, data.data(), data.size(), static_cast<float>(size_));
    }
  }

  // The leader's 16-bit values to its host's ranks, bit for bit. A float broadcast moves bytes
  // without reading them, so the values travel as the bytes of a float buffer: copied in and
  // out rather than viewed in place, since the caller's buffer need not be 4-byte aligned and an
  // odd count does not fill its last float (that one carries 2 bytes of padding).
  void broadcast_halves(std::span<std::uint16_t> data) {
    std::vector<float> words((data.size_bytes() + sizeof(float) - 1) / sizeof(float));
    if (layout_.leader() && !data.empty()) {
      std::memcpy(words.data(), data.data(), data.size_bytes());
    }
    from_leader([&] { after_->broadcast(words, 0); });
    if (!layout_.leader() && !data.empty()) {
      std::memcpy(data.data(), words.data(), data.size_bytes());
    }
  }

  void run_broadcast(std::span<float> data, int root) {
    const int root_host = layout_.host_of_rank[root];
    const std::vector<int>& root_ranks = layout_.ranks_of_host[root_host];
    const int local_root = static_cast<int>(std::find(root_ranks.begin(), root_ranks.end(), root) -
                                            root_ranks.begin());
    if (layout_.host == root_host) in_host([&] { intra_->broadcast(data, local_root); });
    among_leaders([&] { inter_->broadcast(data, root_host); });
    if (layout_.host != root_host) from_leader([&] { after_->broadcast(data, 0); });
  }

  // Every path gathers: the levels' allgathers and broadcasts move bytes without reading them,
  // so every block arrives bit for bit as it was sent (NaN patterns, -0.0), which is what lets
  // allgather_words ride on it (allreduce/communicator.h).
  void run_allgather(std::span<const float> in, std::span<float> out) {
    const std::size_t n = in.size();
    if (!layout_.regular()) return run_irregular_allgather(in, out);
    // Regular: the host's ranks are contiguous, so its gathered blocks are one range of out.
    const std::size_t per_host = n * static_cast<std::size_t>(layout_.local_size());
    const std::span<float> host_block =
        out.subspan(per_host * static_cast<std::size_t>(layout_.host), per_host);
    if (layout_.local_size() > 1) {
      in_host([&] { intra_->allgather(in, host_block); });
    } else {
      std::copy(in.begin(), in.end(), host_block.begin());
    }
    if (layout_.hosts > 1) {
      const std::vector<float> mine(host_block.begin(), host_block.end());
      among_leaders([&] { inter_->allgather(mine, out); });
      from_leader([&] { after_->broadcast(out, 0); });
    }
  }

  // Hosts of different sizes, or ranks not contiguous by host: the leaders' allgather needs
  // blocks of one size, so each host's blocks are padded to the largest host's L ranks.
  //   1. within each host, allgather: the host's blocks in local-rank order    (L n, padded)
  //   2. among the leaders, allgather of those padded blocks                   (H L n)
  //   3. each leader puts block j of host h where its rank ranks_of_host[h][j] goes in out
  //   4. within each host, the leader broadcasts out
  // The leaders move H L n values where N n would do: the padding is the price of irregularity.
  void run_irregular_allgather(std::span<const float> in, std::span<float> out) {
    const std::size_t n = in.size();
    std::size_t widest = 0;
    for (const std::vector<int>& ranks : layout_.ranks_of_host) {
      widest = std::max(widest, ranks.size());
    }
    const std::size_t local = static_cast<std::size_t>(layout_.local_size());
    std::vector<float> host_blocks(widest * n);  // the padding stays zero
    const std::span<float> gathered(host_blocks.data(), local * n);
    if (local > 1) {
      in_host([&] { intra_->allgather(in, gathered); });
    } else if (n > 0) {
      std::memcpy(gathered.data(), in.data(), in.size_bytes());
    }
    std::vector<float> all;
    if (layout_.hosts > 1) {
      if (layout_.leader()) all.resize(static_cast<std::size_t>(layout_.hosts) * widest * n);
      among_leaders([&] { inter_->allgather(host_blocks, all); });
    } else {
      all = std::move(host_blocks);
    }
    // With one host every rank gathered everything in step 1 (and there is no step 4).
    if ((layout_.leader() || layout_.hosts == 1) && n > 0) {
      for (int h = 0; h < layout_.hosts; ++h) {
        const std::vector<int>& ranks = layout_.ranks_of_host[static_cast<std::size_t>(h)];
        for (std::size_t j = 0; j < ranks.size(); ++j) {
          std::memcpy(out.data() + static_cast<std::size_t>(ranks[j]) * n,
                      all.data() + (static_cast<std::size_t>(h) * widest + j) * n,
                      n * sizeof(float));
        }
      }
    }
    from_leader([&] { after_->broadcast(out, 0); });
  }

  const int rank_;
  const int size_;
  const HostLayout layout_;
  const std::shared_ptr<Communicator> intra_;
  const std::shared_ptr<Communicator> after_;
  const std::shared_ptr<Communicator> inter_;
  const milliseconds timeout_;
  std::atomic<std::uint64_t> collectives_{0};
  tcp::WorkQueue queue_;  // last: its thread starts once every member above exists
};

}  // namespace

std::unique_ptr<Communicator> make_hierarchical_communicator(int rank, HostLayout layout,
                                                             HierarchyLevels levels) {
  GRADSYNC_CHECK(levels.in_host != nullptr && levels.from_leader != nullptr,
                 "hierarchical: no communicator within the host");
  return std::make_unique<HierarchicalCommunicator>(rank, std::move(layout), std::move(levels));
}

}  // namespace gradsync
