#include "strategies/dp/dp_strategy.h"

#include <algorithm>
#include <memory>

#include "common/error.h"
#include "common/replica_barrier.h"
#include "common/stopwatch.h"

namespace gradsync {
namespace {

// State shared by the replicas of one process: where each replica's buffers live, the
// optimizer (it runs on replica 0 only) and the two barriers of a step.
struct DpGroup {
  DpGroup(int n, const SgdOptions& sgd_options, std::chrono::milliseconds wait_limit,
          std::shared_ptr<Link> replica_zero_link)
      : replicas(n),
        sgd_options(sgd_options),
        timeout(wait_limit),
        link(std::move(replica_zero_link)),
        grads(static_cast<std::size_t>(n)),
        params(static_cast<std::size_t>(n)),
        buffers(static_cast<std::size_t>(n)),
        gradients_ready(n, "dp gradient barrier"),
        parameters_ready(n, "dp parameter barrier") {}

  int replicas;
  SgdOptions sgd_options;
  std::chrono::milliseconds timeout;
  std::shared_ptr<Link> link;  // replica 0's, or null
  std::vector<std::span<float>> grads;
  std::vector<std::span<float>> params;
  std::vector<std::span<float>> buffers;  // running statistics (attach_buffers); may be empty
  std::unique_ptr<Sgd> sgd;
  ReplicaBarrier gradients_ready;
  ReplicaBarrier parameters_ready;
};

class DpReplica final : public SyncStrategy {
 public:
  DpReplica(std::shared_ptr<DpGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}

  std::string_view name() const override { return "dp"; }
  int rank() const override { return rank_; }
  StepStats last_step_stats() const override { return stats_; }
  Optimizer* optimizer() override { return rank_ == 0 ? group_->sgd.get() : nullptr; }
  void attach_buffers(std::span<float> buffers) override { group_->buffers[rank_] = buffers; }

  void init(std::span<float> params) override {
    DpGroup& g = *group_;
    g.params[rank_] = params;
    g.grads[rank_] = {};
    g.gradients_ready.arrive_and_wait(rank_, g.timeout);  // every replica has registered
    if (rank_ == 0) {
      g.sgd = std::make_unique<Sgd>(params.size(), g.sgd_options);
      // DataParallel replicates module 0: every replica starts from replica 0's parameters.
      for (int r = 1; r < g.replicas; ++r) {
        GRADSYNC_CHECK(g.params[r].size() == params.size(), "dp replicas differ in model size");
        GRADSYNC_CHECK(g.buffers[r].size() == g.buffers[0].size(),
                       "dp replicas differ in buffer size");
        std::copy(params.begin(), params.end(), g.params[r].begin());
      }
      copy_buffers_out();
    }
    g.parameters_ready.arrive_and_wait(rank_, g.timeout);
  }

  void synchronize(std::span<float> grads, std::span<float> params) override {
    DpGroup& g = *group_;
    stats_ = StepStats{};
    const std::uint64_t bytes = params.size_bytes();
    // Parameters and running statistics go out together, as DataParallel's replicate does.
    const std::uint64_t out_bytes = bytes + g.buffers[rank_].size_bytes();
    g.grads[rank_] = grads;

    Stopwatch phase;
    g.gradients_ready.arrive_and_wait(rank_, g.timeout);
    stats_.wait_s = phase.seconds();

    phase.restart();
    if (rank_ == 0) {
      const std::uint64_t others = bytes * static_cast<std::uint64_t>(g.replicas - 1);
      const std::uint64_t others_out = out_bytes * static_cast<std::uint64_t>(g.replicas - 1);
      if (g.link) g.link->receive.acquire(others);
      reduce_onto_replica_zero(grads);
      Stopwatch update;
      g.sgd->step(params, grads);
      stats_.compute_s = update.seconds();
      if (g.link) g.link->send.acquire(others_out);
      for (int r = 1; r < g.replicas; ++r) {
        std::copy(params.begin(), params.end(), g.params[r].begin());
      }
      copy_buffers_out();
      stats_.bytes_received = others;
      stats_.bytes_sent = others_out;
    } else {
      stats_.bytes_sent = bytes;          // its gradient, gathered by replica 0
      stats_.bytes_received = out_bytes;  // the parameters and buffers replica 0 copies back
    }
    g.parameters_ready.arrive_and_wait(rank_, g.timeout);
    stats_.communicate_s = phase.seconds() - stats_.compute_s;
  }

  void abort(const std::string& reason) override {
    group_->gradients_ready.abort(reason);
    group_->parameters_ready.abort(reason);
  }

 private:
  // Replica 0's running statistics into every other replica (while they wait at a barrier).
  void copy_buffers_out() {
    DpGroup& g = *group_;
    const std::span<float> mine = g.buffers[0];
    for (int r = 1; r < g.replicas; ++r) std::copy(mine.begin(), mine.end(), g.buffers[r].begin());
  }

  // Sums replicas 1..N-1 into replica 0's gradient in rank order, then averages. Summing in a
  // fixed order keeps the result deterministic run to run.
  void reduce_onto_replica_zero(std::span<float> grads) {
    DpGroup& g = *group_;
    const std::size_t n = grads.size();
    float* sum = grads.data();
    for (int r = 1; r < g.replicas; ++r) {
      GRADSYNC_CHECK(g.grads[r].size() == n, "dp replicas differ in gradient size");
      const float* other = g.grads[r].data();
      for (std::size_t i = 0; i < n; ++i) sum[i] += other[i];
    }
    const float inv = 1.0f / static_cast<float>(g.replicas);
    for (std::size_t i = 0; i < n; ++i) sum[i] *= inv;
  }

  std::shared_ptr<DpGroup> group_;
  int rank_;
  StepStats stats_;
};

}  // namespace

std::vector<std::unique_ptr<SyncStrategy>> make_dp_group(int replicas, const SgdOptions& sgd,
                                                         std::chrono::milliseconds timeout,
                                                         std::shared_ptr<Link> link) {
  GRADSYNC_CHECK(replicas >= 1, "dp needs at least one replica");
  auto group = std::make_shared<DpGroup>(replicas, sgd, timeout, std::move(link));
  std::vector<std::unique_ptr<SyncStrategy>> out;
  for (int r = 0; r < replicas; ++r) out.push_back(std::make_unique<DpReplica>(group, r));
  return out;
}

}  // namespace gradsync
