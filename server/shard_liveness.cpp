// ShardState's liveness checks, run every tick: who never said HELLO, who went silent, and who
// is alive but holds the others up.
#include <algorithm>

#include "server/shard_state.h"

namespace gradsync {

using Mode = PsShardOptions::Mode;

void ShardState::on_tick(Clock::time_point now, const Sink& send, bool in_transit) {
  send_ = &send;
  if (failure_) return;
  check_silence(now);
  if (!failure_ && !in_transit) check_progress(now);
}

void ShardState::check_silence(Clock::time_point now) {
  const auto timeout = options_.timeout;
  std::string absent;
  int first_absent = -1;
  for (std::size_t r = 0; r < workers_.size(); ++r) {
    if (workers_[r].presence != Presence::kAbsent) continue;
    absent += (absent.empty() ? "" : ", ") + std::to_string(r);
    if (first_absent < 0) first_absent = r;
  }
  if (first_absent >= 0 && now - started_ > timeout) {
    return fail({first_absent, "", name() + " waiting for HELLO",
                 "worker(s) " + absent + " did not say HELLO within " + seconds_text(timeout),
                 true});
  }
  for (std::size_t r = 0; r < workers_.size(); ++r) {
    Worker& w = workers_[r];
    if (w.presence != Presence::kConnected || now - w.last_seen <= timeout) continue;
    const std::string what = "worker " + std::to_string(r) + " (last seen " +
                             seconds_text(now - w.last_seen) + " ago) stopped sending";
    const bool live_left = std::any_of(workers_.begin(), workers_.end(), [&](const Worker& o) {
      return &o != &w && o.presence == Presence::kConnected;
    });
    if (!options_.continue_without_dead_workers || !live_left) {
      return fail(
          {static_cast<int>(r), w.address,
           name() + " step " + std::to_string(options_.mode == Mode::kSync ? version_ : w.clock),
           what + ": ending the run", true});
    }
    w.presence = Presence::kDropped;
    w.held_staleness.reset();
    log(name() + ": " + what + ": dropped, the run goes on without it");
    release_held();
  }
}

// Heartbeats come from their own thread, so a worker whose training thread is stuck still looks
// alive. Without this the others would each time out on their own ("no reply from shard 0")
// with no one to blame; the shard knows whom it waits for, and says so to all of them. Each
// check needs both: someone has waited for the timeout (as long as that worker's own client
// waits), and the awaited worker pushed nothing for as long (it is not merely slow this step).
void ShardState::check_progress(Clock::time_point now) {
  const auto timeout = options_.timeout;
  const Worker& first_rank = workers_[0];
  // Rank 0's "push" is its INIT, due from its HELLO on (last_push is the HELLO's time). Until
  // every worker joined, an INIT may be held at the start gate: a worker that never joins is
  // check_silence()'s to name.
  if (!before_init_.empty() && everyone_joined() && now - before_init_.front().since > timeout &&
      first_rank.presence == Presence::kConnected && alive(first_rank, now) &&
      now - first_rank.last_push > timeout) {
    return fail({0, workers_[0].address, name() + " waiting for INIT",
                 "worker 0 did not send the initial parameters (INIT) within " +
                     seconds_text(timeout) +
                     " of the first request waiting for them: ending the run",
                 true});
  }
  int first = -1;
  if (options_.mode == Mode::kSync && pushes_this_step_ > 0 &&
      now - step_waiting_since_ > timeout) {
    const std::size_t chunks = store_.chunks().size();
    const std::string who =
        laggards([&](const Worker& w) { return w.got_count < chunks; }, now, first);
    if (first < 0) return;
    return fail({first, workers_[first].address, name() + " step " + std::to_string(version_),
                 "step " + std::to_string(version_) + " waits for worker(s) " + who +
                     ", alive but with no push for over " + seconds_text(timeout) +
                     ": ending the run",
                 true});
  }
  for (std::size_t r = 0; r < workers_.size(); ++r) {
    const Worker& held = workers_[r];
    if (!held.held_staleness || held.presence != Presence::kConnected ||
        now - held.held_since <= timeout) {
      continue;
    }
    // ssp holds worker r while it is more than `staleness` steps ahead of the slowest.
    const std::string who = laggards(
        [&](const Worker& w) { return w.clock + options_.staleness < held.clock; }, now, first);
    if (first < 0) continue;
    return fail({first, workers_[first].address, name() + " step " + std::to_string(held.clock),
                 "worker " + std::to_string(r) + " waits at step " + std::to_string(held.clock) +
                     " (staleness bound " + std::to_string(options_.staleness) +
                     ") for worker(s) " + who + ", alive but with no push for over " +
                     seconds_text(timeout) + ": ending the run",
                 true});
  }
}

// Heard from (a heartbeat at least) within half the timeout: one that is silent longer may be
// dead, and check_silence() says so, or drops it, within the other half.
bool ShardState::alive(const Worker& w, Clock::time_point now) const {
  return now - w.last_seen <= options_.timeout / 2;
}

// The connected, alive workers that `owes` names and that pushed nothing for over the timeout,
// as "2, 3"; `first` is the lowest of them, -1 for none.
std::string ShardState::laggards(const std::function<bool(const Worker&)>& owes,
                                 Clock::time_point now, int& first) const {
  std::string text;
  first = -1;
  for (std::size_t r = 0; r < workers_.size(); ++r) {
    const Worker& w = workers_[r];
    if (w.presence != Presence::kConnected || !alive(w, now) || !owes(w) ||
        now - w.last_push <= options_.timeout) {
      continue;
    }
    text += (text.empty() ? "" : ", ") + std::to_string(r);
    if (first < 0) first = static_cast<int>(r);
  }
  return text;
}

}  // namespace gradsync
