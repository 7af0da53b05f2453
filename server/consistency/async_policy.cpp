#include "server/consistency/async_policy.h"

#include <algorithm>
#include <limits>
#include <span>

namespace gradsync {

AsyncPolicy::AsyncPolicy(const PsShardOptions& options, ConsistencyState& state,
                         const ShardSessions& sessions, const ShardOutput& out)
    : ConsistencyPolicy(options, state, sessions, out), pushing_(state.workers()) {}

std::optional<ShardFailure> AsyncPolicy::push(int rank, const wire::Header& header,
                                              const Buffer& payload, std::size_t chunk) {
  ConsistencyState::Clocks& w = state_.clocks(rank);
  Pushing& p = pushing_[rank];
  std::string why;
  if (!p.step && header.step < w.clock) {
    why = "worker " + std::to_string(rank) + " pushed step " + std::to_string(header.step) +
          " after step " + std::to_string(w.clock - 1) + ": steps must increase";
  } else if (p.step && header.step != *p.step) {
    why = "worker " + std::to_string(rank) + " pushed step " + std::to_string(header.step) +
          " before every chunk of step " + std::to_string(*p.step) + " arrived";
  } else if (w.got[chunk]) {
    why = "worker " + std::to_string(rank) + " pushed chunk " + std::to_string(chunk) +
          " of step " + std::to_string(header.step) + " twice";
  }
  if (!why.empty()) {
    out_.answer_error(sessions_.peer(rank), why);
    return std::nullopt;
  }
  if (!p.step) {
    // The first chunk of step t. Staleness in SSP's terms: the worker computed step t on
    // parameters holding every worker's updates for steps < read_clock. Sync makes it 0; the
    // ssp hold (SspPolicy) keeps it <= s.
    p.step = header.step;
    const std::uint64_t lag = header.step - std::min(header.step, w.read_clock);
    p.staleness = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(lag, std::numeric_limits<std::uint32_t>::max()));
    const std::uint64_t slowest = state_.slowest_clock_if(rank, header.step + 1);
    p.streaming = may_stream(header.step, slowest);
    // What the replies will hold includes every update of steps below the slowest clock now
    // (this worker's own step t included: each chunk is answered after it is applied).
    if (p.streaming) w.read_clock = slowest;
  }
  state_.arrived(rank, chunk);
  // Each chunk of the gradient is applied as it is, as one SGD step of its own: each worker's
  // gradient is already the mean over its batch, so this is Hogwild/Downpour's rule (one
  // optimizer step per push). Scaling by 1/N would instead make N pushes move as far as one
  // sync step.
  state_.store().apply(chunk, std::span<const Buffer>(&payload, 1));
  if (p.streaming) out_.send(state_.reply_chunk(rank, chunk, state_.version(), p.staleness));
  if (w.got_count < state_.chunks()) return std::nullopt;

  // Every chunk of step t arrived: the worker's step counts as pushed.
  state_.advance();
  w.clock = *p.step + 1;
  p.step.reset();
  state_.clear_arrivals(rank);
  step_pushed(rank);
  return std::nullopt;
}

bool AsyncPolicy::may_stream(std::uint64_t, std::uint64_t) const { return true; }

void AsyncPolicy::step_pushed(int) {}

}  // namespace gradsync
