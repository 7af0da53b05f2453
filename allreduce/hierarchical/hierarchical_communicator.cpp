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

  void run_broadcast(std::span<float> data, int root) {
    const int root_host = layout_.host_of_rank[root];
    const std::vector<int>& root_ranks = layout_.ranks_of_host[root_host];
    const int local_root = static_cast<int>(std::find(root_ranks.begin(), root_ranks.end(), root) -
                                            root_ranks.begin());
    if (layout_.host == root_host) in_host([&] { intra_->broadcast(data, local_root); });
    among_leaders([&] { inter_->broadcast(data, root_host); });
    if (layout_.host != root_host) from_leader([&] { after_->broadcast(data, 0); });
  }

  void run_allgather(std::span<const float> in, std::span<float> out) {
    const std::size_t n = in.size();
    if (!layout_.regular()) {
      // Each rank's block in a zero-filled buffer, summed: x + 0 is x, so every block arrives
      // as it was sent (a -0.0 as +0.0), at the cost of an all-reduce of the whole.
      std::fill(out.begin(), out.end(), 0.0f);
      std::copy(in.begin(), in.end(), out.begin() + static_cast<std::ptrdiff_t>(n * rank_));
      run_allreduce(out, out, ReduceOp::kSum);
      return;
    }
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
