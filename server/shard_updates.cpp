// ShardState's parameter side: INIT, the three update rules, and the chunked replies.
#include <algorithm>
#include <limits>

#include "server/shard_state.h"

namespace gradsync {

using wire::MessageType;
using Mode = PsShardOptions::Mode;

void ShardState::init(int rank, const Buffer& payload) {
  const std::string& peer = workers_[rank].peer;
  std::string why;
  if (rank != 0) why = "INIT from worker " + std::to_string(rank) + ": only rank 0 initialises";
  if (initialised_) why = "INIT again: the parameters are already initialised";
  if (!why.empty()) {
    log(name() + ": " + why);
    return emit(error_to(peer, why));
  }
  store_.set(payload.bytes);
  initialised_ = true;
  // Rank 0 already holds these parameters: the acknowledgement is a REPLY of an empty range.
  emit({peer,
        wire::make_header(MessageType::kReply, options_.shard, version_, range_.begin, range_.begin,
                          0),
        {}});
  workers_[0].read_clock = slowest_clock(0);
  // Answer what waited for the parameters, in arrival order, as if it came now.
  while (!before_init_.empty() && !failure_) {
    const Deferred d = std::move(before_init_.front());
    before_init_.pop_front();
    if (workers_[d.rank].presence != Presence::kConnected) continue;
    if (d.header.type == MessageType::kPull) {
      reply(d.rank, 0);
    } else {
      push_pull(d.rank, d.header, d.payload);
    }
  }
}

void ShardState::push_pull(int rank, const wire::Header& header, const Buffer& payload) {
  if (options_.mode == Mode::kSync) return push_sync(rank, header, payload);
  push_async(rank, header, payload);
}

void ShardState::push_sync(int rank, const wire::Header& header, const Buffer& payload) {
  Worker& w = workers_[rank];
  for (std::size_t r = 0; r < workers_.size(); ++r) {
    if (workers_[r].presence == Presence::kLeft) {
      // An average over fewer workers would be a silently different answer, not a slower one.
      return fail({static_cast<int>(r), workers_[r].address,
                   name() + " step " + std::to_string(version_),
                   "worker " + std::to_string(r) + " left the run, step " +
                       std::to_string(version_) + " cannot complete without it",
                   false});
    }
  }
  std::string why;
  if (header.step != version_) {
    why = "worker " + std::to_string(rank) + " pushed step " + std::to_string(header.step) +
          ", this shard is at step " + std::to_string(version_) +
          " (sync: every worker pushes every step once, in order)";
  } else if (w.pushed) {
    why =
        "worker " + std::to_string(rank) + " pushed step " + std::to_string(header.step) + " twice";
  }
  if (!why.empty()) {
    log(name() + ": " + why);
    return emit(error_to(w.peer, why));
  }
  w.pushed = payload;  // kept, not copied: the frame itself waits for the others
  if (++pushed_this_step_ < static_cast<int>(workers_.size())) return;

  // Every worker pushed this step: one Sgd step with the average (in rank order, so the result
  // does not depend on arrival order), and the same new parameters to everyone, each chunk
  // sent to all workers as soon as it is updated.
  std::vector<Buffer> grads;
  grads.reserve(workers_.size());
  for (Worker& each : workers_) {
    grads.push_back(std::move(*each.pushed));
    each.pushed.reset();
  }
  ++version_;
  pushed_this_step_ = 0;
  for (Worker& each : workers_) each.clock = version_;
  for (Worker& each : workers_) each.read_clock = version_;  // everyone is at this step
  store_.apply_average(grads, [&](ParamStore::Chunk chunk) {
    for (std::size_t r = 0; r < workers_.size(); ++r) emit(reply_chunk(r, chunk, 0));
  });
}

void ShardState::push_async(int rank, const wire::Header& header, const Buffer& payload) {
  Worker& w = workers_[rank];
  if (header.step < w.clock) {
    const std::string why = "worker " + std::to_string(rank) + " pushed step " +
                            std::to_string(header.step) + " after step " +
                            std::to_string(w.clock - 1) + ": steps must increase";
    log(name() + ": " + why);
    return emit(error_to(w.peer, why));
  }
  // Staleness in SSP's terms: the worker computed step t on parameters holding every worker's
  // updates for steps < read_clock. Sync makes it 0; the ssp hold below keeps it <= s.
  const std::uint64_t lag = header.step - std::min(header.step, w.read_clock);
  const auto staleness = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(lag, std::numeric_limits<std::uint32_t>::max()));
  ++version_;
  w.clock = header.step + 1;
  // SSP: the worker may start step w.clock only while it is at most s steps ahead of the
  // slowest worker's current step; otherwise its reply waits (release_held) for the slowest.
  const bool hold =
      options_.mode == Mode::kSsp && w.clock > slowest_clock(w.clock) + options_.staleness;
  if (hold) w.held_staleness = staleness;
  if (!hold) w.read_clock = slowest_clock(w.clock);
  // The gradient is applied as it is, as one SGD step of its own: each worker's gradient is
  // already the mean over its batch, so this is Hogwild/Downpour's rule (one optimizer step per
  // push). Scaling by 1/N would instead make N pushes move as far as one sync step.
  store_.apply(payload, [&](ParamStore::Chunk chunk) {
    if (!hold) emit(reply_chunk(rank, chunk, staleness));
  });
  release_held();  // this push may have been the slowest worker's, letting held ones go on
}

void ShardState::release_held() {
  for (std::size_t r = 0; r < workers_.size(); ++r) {
    Worker& w = workers_[r];
    if (!w.held_staleness || w.presence != Presence::kConnected) continue;
    if (w.clock > slowest_clock(w.clock) + options_.staleness) continue;
    const std::uint32_t staleness = *w.held_staleness;
    w.held_staleness.reset();
    reply(r, staleness);
  }
}

void ShardState::reply(int rank, std::uint32_t staleness) {
  // What the worker now holds includes every update of steps below the slowest clock.
  workers_[rank].read_clock = slowest_clock(workers_[rank].clock);
  for (const ParamStore::Chunk& chunk : store_.chunks()) emit(reply_chunk(rank, chunk, staleness));
}

Outgoing ShardState::reply_chunk(int rank, ParamStore::Chunk chunk, std::uint32_t staleness) const {
  return {workers_[rank].peer,
          wire::make_header(MessageType::kReply, options_.shard, version_,
                            range_.begin + chunk.begin, range_.begin + chunk.end,
                            (chunk.end - chunk.begin) * sizeof(float), staleness),
          store_.snapshot(chunk)};
}

}  // namespace gradsync
