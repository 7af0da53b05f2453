// AsyncPolicy: asynchronous updates (PsShardOptions::Mode::kAsync, Hogwild/Downpour). Each
// chunk of a push is one Sgd step on that chunk with that worker's gradient, applied on
// arrival and answered at once with its REPLY; no worker waits for another. A worker's step
// counts as pushed (its clock advances, and the shard's version) once all its chunks arrived.
//
//   AsyncPolicy policy(options, state, sessions, out);
//   policy.push(rank, header, payload, chunk);   // applied; its REPLY sent
//
// Each REPLY's aux carries the push's staleness in steps (see ConsistencyState's clocks). A
// worker's steps must increase, and the chunks of one step come together: anything else is
// answered with an ERROR. SspPolicy is this with replies held beyond a staleness bound, through
// the two hooks below.
//
// Not thread-safe (see ConsistencyPolicy). Nothing waits: every chunk is applied (in place, or
// copy-on-write: see ParamStore) before push() returns.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "server/consistency/consistency_policy.h"

namespace gradsync {

class AsyncPolicy : public ConsistencyPolicy {
 public:
  AsyncPolicy(const PsShardOptions& options, ConsistencyState& state, const ShardSessions& sessions,
              const ShardOutput& out);

  std::optional<ShardFailure> push(int rank, const wire::Header& header, const Buffer& payload,
                                   std::size_t chunk) override;
  std::optional<ShardFailure> worker_left(int) override { return std::nullopt; }
  void worker_dropped(int) override {}
  std::optional<ShardFailure> check_progress(Clock::time_point) const override {
    return std::nullopt;  // no worker ever waits for another
  }
  std::uint64_t step_of(int rank) const override { return state_.clocks(rank).clock; }

 protected:
  // The step a worker is pushing, and how its chunks are answered.
  struct Pushing {
    std::optional<std::uint64_t> step;  // the step whose chunks arrive
    bool streaming = false;             // answer each chunk as it is applied
    std::uint32_t staleness = 0;        // of the step being (or last) pushed
  };
  const Pushing& pushing(int rank) const { return pushing_[rank]; }

  // On a step's first chunk: may each chunk of it be answered as soon as it is applied,
  // `slowest` being the slowest clock once this step counts? Async: always.
  virtual bool may_stream(std::uint64_t step, std::uint64_t slowest) const;
  // Every chunk of worker `rank`'s step arrived and was applied; its clock has advanced.
  // Async: nothing more, each chunk was answered as it was applied.
  virtual void step_pushed(int rank);

 private:
  std::vector<Pushing> pushing_;
};

}  // namespace gradsync
