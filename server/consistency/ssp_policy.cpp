#include "server/consistency/ssp_policy.h"

#include "common/error.h"

namespace gradsync {

SspPolicy::SspPolicy(const PsShardOptions& options, ConsistencyState& state,
                     const ShardSessions& sessions, const ShardOutput& out)
    : AsyncPolicy(options, state, sessions, out), held_(state.workers()) {}

// SSP: the worker may start step t + 1 only while it is at most s steps ahead of the slowest
// worker's current step. If that already holds now, it can only keep holding (clocks only
// grow), so each chunk is answered as soon as it is applied; otherwise the answer waits for the
// whole step (and maybe for the slowest: release_held).
bool SspPolicy::may_stream(std::uint64_t step, std::uint64_t slowest) const {
  return step + 1 <= slowest + options_.staleness;
}

void SspPolicy::step_pushed(int rank) {
  const Pushing& p = pushing(rank);
  if (!p.streaming) {
    const std::uint64_t clock = state_.clocks(rank).clock;
    const bool hold = clock > state_.slowest_clock(clock) + options_.staleness;
    if (hold) {
      held_[rank].staleness = p.staleness;
      held_[rank].since = sessions_.last_push(rank);  // this push's arrival
    } else {
      state_.reply(rank, p.staleness);
    }
  }
  release_held();  // this push may have been the slowest worker's, letting held ones go on
}

std::optional<ShardFailure> SspPolicy::worker_left(int rank) {
  held_[rank].staleness.reset();
  release_held();  // the slowest may just have left
  return std::nullopt;
}

void SspPolicy::worker_dropped(int rank) {
  held_[rank].staleness.reset();
  release_held();  // the slowest may just have been dropped
}

void SspPolicy::release_held() {
  for (int r = 0; r < state_.workers(); ++r) {
    Held& held = held_[r];
    if (!held.staleness || !sessions_.connected(r)) continue;
    const std::uint64_t clock = state_.clocks(r).clock;
    if (clock > state_.slowest_clock(clock) + options_.staleness) continue;
    const std::uint32_t staleness = *held.staleness;
    held.staleness.reset();
    state_.reply(r, staleness);
  }
}

// A reply held for the timeout: the workers it waits for are named if alive but with no push
// for as long (merely slow ones are waited for).
std::optional<ShardFailure> SspPolicy::check_progress(Clock::time_point now) const {
  const auto timeout = options_.timeout;
  int first = -1;
  for (int r = 0; r < state_.workers(); ++r) {
    const Held& held = held_[r];
    if (!held.staleness || !sessions_.connected(r) || now - held.since <= timeout) continue;
    // ssp holds worker r while it is more than `staleness` steps ahead of the slowest.
    const std::uint64_t clock = state_.clocks(r).clock;
    const std::string who = sessions_.laggards(
        [&](int o) { return state_.clocks(o).clock + options_.staleness < clock; }, now, first);
    if (first < 0) continue;
    return ShardFailure{
        first, sessions_.address(first), out_.name() + " step " + std::to_string(clock),
        "worker " + std::to_string(r) + " waits at step " + std::to_string(clock) +
            " (staleness bound " + std::to_string(options_.staleness) + ") for worker(s) " + who +
            ", alive but with no push for over " + seconds_text(timeout) + ": ending the run",
        true};
  }
  return std::nullopt;
}

}  // namespace gradsync
