// SyncPolicy: bulk-synchronous updates (PsShardOptions::Mode::kSync). Chunk c of step t is
// held until all N workers pushed it; then one Sgd step on chunk c with their average (in rank
// order) and chunk c's REPLY to every worker, while later chunks may still be arriving. The
// step ends, and the shard's version advances, when every chunk did; a checkpoint due at that
// step is written then.
//
//   SyncPolicy policy(options, state, sessions, out);
//   policy.push(rank, header, payload, chunk);   // held, or chunk c is complete: N replies
//
// Every worker pushes every step once, in order: a push of a step other than the shard's, or a
// chunk pushed twice in a step, is answered with an ERROR. A worker that left (BYE) ends the
// run as soon as a step needs it. Staleness is always 0.
//
// Not thread-safe (see ConsistencyPolicy). Pushed Buffers are kept, not copied, until their
// chunk is averaged. Writing a checkpoint blocks on the file system, and throws if it fails.
#pragma once

#include <optional>
#include <vector>

#include "server/consistency/consistency_policy.h"

namespace gradsync {

class SyncPolicy : public ConsistencyPolicy {
 public:
  SyncPolicy(const PsShardOptions& options, ConsistencyState& state, const ShardSessions& sessions,
             const ShardOutput& out);

  std::optional<ShardFailure> push(int rank, const wire::Header& header, const Buffer& payload,
                                   std::size_t chunk) override;
  std::optional<ShardFailure> worker_left(int rank) override;
  void worker_dropped(int) override {}  // never happens: validate() refuses it in sync mode
  std::optional<ShardFailure> check_progress(Clock::time_point now) const override;
  std::uint64_t step_of(int) const override { return state_.version(); }

 private:
  void complete_chunk(std::size_t chunk);
  bool checkpoint_due(std::uint64_t step) const;
  void write_checkpoint() const;

  // Per worker, per chunk: its push of this step, held until all N pushed that chunk.
  std::vector<std::vector<std::optional<Buffer>>> pushed_;
  // Per chunk, how many workers pushed it this step; chunks updated and answered; and chunk
  // messages received this step (a worker leaving then breaks the step).
  std::vector<int> chunk_pushes_;
  std::size_t chunks_done_ = 0;
  std::uint64_t pushes_this_step_ = 0;
  Clock::time_point step_waiting_since_;  // the step's first push: someone waits from then
};

}  // namespace gradsync
