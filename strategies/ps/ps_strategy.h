// `ps`: a parameter server over ZeroMQ (ps-lite's KVWorker side). The optimizer runs on the K
// server shards (server/), each over its own key range of the flat buffer; a worker only
// pushes its gradient and pulls fresh parameters:
//
//   init:         rank 0 sends its initial parameters to the shards; every other rank pulls
//                 them, so all replicas start equal
//   synchronize:  one push_pull to all K shards at once (gradient ranges out in chunks, parameter
//                 ranges back into `params` chunk by chunk), then wait: in sync mode for the
//                 step's average of all N workers, which each shard forms chunk by chunk as the
//                 pushes arrive, so pushing and pulling overlap; in async / ssp mode for the
//                 newest parameters, which may lag behind the server by a few versions
//                 (recorded per step as `staleness`)
//
// Traffic per step: each worker sends and receives S; shard k moves 2*N*|range_k|*4 bytes. Under
// comm.compression (PsClientOptions::compression) the pushes shrink, the replies do not: fp16 and
// bf16 send S/2, top-k 8 bytes an entry, comm.topk_ratio of each chunk. With an emulated link
// (PsClientOptions::link) an uncompressed sync step takes about max(S, N*S/K) / rate plus a few
// chunks (experiments/cost_model.h).
// One object per worker process; not thread-safe.
#pragma once

#include <cstdint>
#include <memory>

#include "strategies/ps/ps_client.h"
#include "strategies/sync_strategy.h"

namespace gradsync {

class PsStrategy final : public SyncStrategy {
 public:
  // `first_step` > 0: resuming from a checkpoint of that step, which the shards were started
  // from; every rank then pulls the shards' parameters and pushes from that step on.
  explicit PsStrategy(const PsClientOptions& options, std::uint64_t first_step = 0);
  ~PsStrategy() override;

  std::string_view name() const override { return "ps"; }
  int rank() const override { return rank_; }
  void init(std::span<float> params) override;
  void synchronize(std::span<float> grads, std::span<float> params) override;
  StepStats last_step_stats() const override { return stats_; }
  // One "push_pull" span per shard (index: the shard), from the push's issue to that shard's
  // last reply filed, each with an arrow to the shard's receipt of the push.
  std::span<const TraceSpan> last_step_spans() const override { return spans_; }

 private:
  PsClientOptions options_;
  int rank_;
  std::unique_ptr<PsClient> client_;
  std::uint64_t step_ = 0;
  StepStats stats_;
  std::vector<TraceSpan> spans_;
};

}  // namespace gradsync
