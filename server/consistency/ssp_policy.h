// SspPolicy: stale-synchronous updates (PsShardOptions::Mode::kSsp, bound s = options.staleness).
// As AsyncPolicy, every chunk is applied on arrival, but a worker may start step t + 1 only
// while it is at most s steps ahead of the slowest worker's clock. A push that keeps within the
// bound is answered chunk by chunk as each is applied; otherwise the whole range is answered at
// once when the step's last chunk arrives, or later, when the slowest worker catches up (or
// leaves, or is dropped) and releases it.
//
//   SspPolicy policy(options, state, sessions, out);
//   policy.push(rank, header, payload, chunk);   // applied; answered now, at the step's end,
//                                                // or once the slowest catches up
//
// The bound keeps every push's staleness (REPLY aux) <= s. A reply held for over
// options.timeout names the workers it waits for, if alive but not pushing (check_progress).
//
// Not thread-safe (see ConsistencyPolicy). A held reply is a note (its staleness, and since
// when), not a copy of the parameters: they are read when it is released.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "server/consistency/async_policy.h"

namespace gradsync {

class SspPolicy : public AsyncPolicy {
 public:
  SspPolicy(const PsShardOptions& options, ConsistencyState& state, const ShardSessions& sessions,
            const ShardOutput& out);

  std::optional<ShardFailure> worker_left(int rank) override;
  void worker_dropped(int rank) override;
  std::optional<ShardFailure> check_progress(Clock::time_point now) const override;

 protected:
  bool may_stream(std::uint64_t step, std::uint64_t slowest) const override;
  void step_pushed(int rank) override;

 private:
  // Answers the held replies whose workers are now within the bound.
  void release_held();

  struct Held {
    std::optional<std::uint32_t> staleness;  // a reply waiting for the slowest
    Clock::time_point since;                 // when that reply began to wait
  };
  std::vector<Held> held_;
};

}  // namespace gradsync
