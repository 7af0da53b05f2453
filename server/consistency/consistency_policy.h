// ConsistencyPolicy: one consistency mode's rules (PsShardOptions::Mode): when a pushed chunk
// is applied, when its replies go out, and whom a waiting worker waits for. One implementation
// per mode, all over the same ConsistencyState:
//   SyncPolicy   (sync_policy.h)   every chunk waits for all N pushes, applied once, averaged
//   AsyncPolicy  (async_policy.h)  every chunk applied on arrival, answered at once
//   SspPolicy    (ssp_policy.h)    as async, with replies held beyond the staleness bound
//
//   std::unique_ptr<ConsistencyPolicy> policy =
//       std::make_unique<SyncPolicy>(options, state, sessions, out);
//   if (auto failure = policy->push(rank, header, payload, chunk)) ...;  // per PUSHPULL
//   if (auto failure = policy->check_progress(now)) ...;                 // every tick
//
// ShardState calls push only for connected workers past the start gate (worker_left,
// worker_dropped and step_of whenever the sessions need them); the session rules
// (ShardSessions) stay outside, and the policy only reads them. A protocol violation by one
// worker (a chunk pushed twice, a step out of order) is answered with an ERROR to that worker
// and the run goes on; a returned ShardFailure ends the run (ShardState tells every connected
// worker).
//
// Not thread-safe: the thread driving ShardState calls it. Nothing blocks: a push waiting for
// others stays in the policy (its Buffer kept, not copied) until they arrive. `options`,
// `state`, `sessions` and `out` must outlive it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "server/consistency/consistency_state.h"
#include "server/message.h"
#include "server/shard_options.h"
#include "server/shard_output.h"
#include "server/shard_sessions.h"

namespace gradsync {

class ConsistencyPolicy {
 public:
  using Clock = std::chrono::steady_clock;

  virtual ~ConsistencyPolicy() = default;
  ConsistencyPolicy(const ConsistencyPolicy&) = delete;
  ConsistencyPolicy& operator=(const ConsistencyPolicy&) = delete;

  // Chunk `chunk` of worker `rank`'s gradient for step header.step (a worker pushes every
  // chunk of its step, in order, before its next step): checked, applied, answered.
  virtual std::optional<ShardFailure> push(int rank, const wire::Header& header,
                                           const Buffer& payload, std::size_t chunk) = 0;
  // Worker `rank` said BYE (ShardSessions counts it as left already).
  virtual std::optional<ShardFailure> worker_left(int rank) = 0;
  // Worker `rank` was given up for dead, and the run goes on without it.
  virtual void worker_dropped(int rank) = 0;
  // The mode's progress check (see ShardState::on_tick): a worker alive but not pushing that
  // others have waited on for options.timeout, named. Not called while messages are in transit.
  virtual std::optional<ShardFailure> check_progress(Clock::time_point now) const = 0;
  // The step worker `rank` is at, for failures to name ("shard 0 step 14").
  virtual std::uint64_t step_of(int rank) const = 0;

 protected:
  ConsistencyPolicy(const PsShardOptions& options, ConsistencyState& state,
                    const ShardSessions& sessions, const ShardOutput& out)
      : options_(options), state_(state), sessions_(sessions), out_(out) {}

  const PsShardOptions& options_;
  ConsistencyState& state_;
  const ShardSessions& sessions_;
  const ShardOutput& out_;
};

}  // namespace gradsync
