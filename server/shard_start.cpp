// ShardState's INIT and start gate: rank 0's initial parameters, and the PULLs and PUSHPULLs
// held until both the parameters are there and every worker said HELLO. It joins the session
// rules (who has joined) to the consistency rules (what a held push does), so it is the
// coordinator's, not either side's.
#include <algorithm>

#include "common/error.h"
#include "server/shard_state.h"

namespace gradsync {
namespace {

using wire::MessageType;

constexpr long kMaxDeferredPerWorker = 8;  // requests held for INIT, per worker

}  // namespace

void ShardState::hold(const std::string& peer, Deferred request) {
  // A worker has one request in flight, a few at most (a push_pull is one message per chunk);
  // more is a flood, not a worker.
  const auto mine = std::count_if(before_init_.begin(), before_init_.end(),
                                  [&](const Deferred& d) { return d.rank == request.rank; });
  const auto limit = kMaxDeferredPerWorker * static_cast<long>(params_.chunks());
  if (mine >= limit) {
    return reject(peer, request.header.to_string() + ": too many requests before INIT");
  }
  before_init_.push_back(std::move(request));
}

void ShardState::init(int rank, const Buffer& payload) {
  std::string why;
  if (rank != 0) why = "INIT from worker " + std::to_string(rank) + ": only rank 0 initialises";
  if (params_.initialised() || pending_init_) {
    why = "INIT again: the parameters are already initialised";
  }
  if (!why.empty()) {
    return out_.answer_error(sessions_.peer(rank), why);
  }
  if (!sessions_.everyone_joined()) {
    pending_init_ = payload;  // kept, not copied: answered when the last worker says HELLO
    return;
  }
  apply_init(payload);
}

void ShardState::apply_init(const Buffer& payload) {
  params_.initialise(payload);
  answer_deferred();
}

void ShardState::open_start_gate() {
  if (pending_init_) {
    const Buffer payload = std::move(*pending_init_);
    pending_init_.reset();
    // Rank 0 may have left since (BYE): its INIT still initialises, its ack goes nowhere.
    return apply_init(payload);
  }
  if (params_.initialised()) answer_deferred();  // resumed from a checkpoint: no INIT comes
}

void ShardState::answer_deferred() {
  // Answer what waited for the parameters, in arrival order, as if it came now. The workers'
  // init ends with these answers: the trace's time zero, as theirs is.
  trace_.start_clock(Clock::now());
  while (!before_init_.empty() && !failure_) {
    const Deferred d = std::move(before_init_.front());
    before_init_.pop_front();
    if (!sessions_.connected(d.rank)) continue;
    if (d.header.type == MessageType::kPull) {
      params_.reply(d.rank, 0);
    } else {
      push(d.rank, d.header, d.payload, d.chunk);
    }
  }
}

void ShardState::check_init(Clock::time_point now) {
  const auto timeout = options_.timeout;
  // Rank 0's "push" is its INIT, due from its HELLO on (last_push is the HELLO's time). Until
  // every worker joined, an INIT may be held at the start gate: a worker that never joins is
  // check_silence()'s to name.
  if (!before_init_.empty() && sessions_.everyone_joined() &&
      now - before_init_.front().since > timeout && sessions_.connected(0) &&
      sessions_.alive(0, now) && now - sessions_.last_push(0) > timeout) {
    return fail({0, sessions_.address(0), out_.name() + " waiting for INIT",
                 "worker 0 did not send the initial parameters (INIT) within " +
                     seconds_text(timeout) +
                     " of the first request waiting for them: ending the run",
                 true});
  }
}

}  // namespace gradsync
