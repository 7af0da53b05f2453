// ShardState's parameter side: INIT, the three update rules chunk by chunk, and the replies.
#include <algorithm>
#include <filesystem>
#include <limits>

#include "common/checkpoint_file.h"
#include "server/shard_state.h"

namespace gradsync {

using wire::MessageType;
using Mode = PsShardOptions::Mode;

void ShardState::init(int rank, const Buffer& payload) {
  const std::string& peer = workers_[rank].peer;
  std::string why;
  if (rank != 0) why = "INIT from worker " + std::to_string(rank) + ": only rank 0 initialises";
  if (initialised_ || pending_init_) why = "INIT again: the parameters are already initialised";
  if (!why.empty()) {
    return answer_error(peer, why);
  }
  if (!everyone_joined()) {
    pending_init_ = payload;  // kept, not copied: answered when the last worker says HELLO
    return;
  }
  apply_init(payload);
}

void ShardState::apply_init(const Buffer& payload) {
  store_.set(payload.bytes);
  initialised_ = true;
  // Rank 0 already holds these parameters: the acknowledgement is a REPLY of an empty range.
  emit({workers_[0].peer,
        wire::make_header(MessageType::kReply, options_.shard, version_, range_.begin, range_.begin,
                          0),
        {}});
  workers_[0].read_clock = slowest_clock(0);
  answer_deferred();
}

bool ShardState::everyone_joined() const {
  return std::none_of(workers_.begin(), workers_.end(),
                      [](const Worker& w) { return w.presence == Presence::kAbsent; });
}

void ShardState::open_start_gate() {
  if (pending_init_) {
    const Buffer payload = std::move(*pending_init_);
    pending_init_.reset();
    // Rank 0 may have left since (BYE): its INIT still initialises, its ack goes nowhere.
    return apply_init(payload);
  }
  if (initialised_) answer_deferred();  // resumed from a checkpoint: no INIT comes
}

void ShardState::answer_deferred() {
  // Answer what waited for the parameters, in arrival order, as if it came now.
  while (!before_init_.empty() && !failure_) {
    const Deferred d = std::move(before_init_.front());
    before_init_.pop_front();
    if (workers_[d.rank].presence != Presence::kConnected) continue;
    if (d.header.type == MessageType::kPull) {
      reply(d.rank, 0);
    } else {
      push_pull(d.rank, d.header, d.payload, d.chunk);
    }
  }
}

void ShardState::push_pull(int rank, const wire::Header& header, const Buffer& payload,
                           std::size_t chunk) {
  if (options_.mode == Mode::kSync) return push_sync(rank, header, payload, chunk);
  push_async(rank, header, payload, chunk);
}

void ShardState::push_sync(int rank, const wire::Header& header, const Buffer& payload,
                           std::size_t chunk) {
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
  } else if (w.got[chunk]) {
    // Also after the chunk was averaged and answered: `got` lasts until the step ends.
    why = "worker " + std::to_string(rank) + " pushed chunk " + std::to_string(chunk) +
          " of step " + std::to_string(header.step) + " twice";
  }
  if (!why.empty()) {
    return answer_error(w.peer, why);
  }
  w.got[chunk] = true;
  ++w.got_count;
  if (pushes_this_step_++ == 0) step_waiting_since_ = w.last_push;  // this push's arrival
  w.pushed[chunk] = payload;  // kept, not copied: the frame itself waits for the others
  if (++chunk_pushes_[chunk] < static_cast<int>(workers_.size())) return;

  // Every worker pushed chunk c of this step: one Sgd step on it with the average (in rank
  // order, so the result does not depend on arrival order, and is the same as a whole-range
  // average: the update is element-wise), and the same new chunk to everyone at once, while
  // later chunks may still be arriving. Chunks complete in order: each worker pushes in order.
  std::vector<Buffer> grads;
  grads.reserve(workers_.size());
  for (Worker& each : workers_) {
    grads.push_back(std::move(*each.pushed[chunk]));
    each.pushed[chunk].reset();
  }
  chunk_pushes_[chunk] = 0;
  store_.apply(chunk, grads);
  grads.clear();  // the frames go back to ZeroMQ now, not after the replies
  const std::uint64_t next = version_ + 1;  // the version these parameters now belong to
  if (++chunks_done_ == store_.chunks().size()) {
    // The step is complete once its last chunk is: everyone is at the next step. This happens
    // before the last chunk's replies leave, so no worker can push step `next` any earlier.
    version_ = next;
    chunks_done_ = 0;
    pushes_this_step_ = 0;
    for (Worker& each : workers_) {
      each.clock = version_;
      each.read_clock = version_;
      std::fill(each.got.begin(), each.got.end(), false);
      each.got_count = 0;
    }
    // Before the last chunk's replies leave: no worker is past this step while it is written.
    if (checkpoint_due(version_)) write_checkpoint();
  }
  // Shard k answers rank k mod N first, then the next ones: with K shards answering at once,
  // each worker's link then gets one shard's chunk at a time instead of all K together
  // (the workers stagger their pushes over the shards the same way, see PsClient).
  const std::size_t n = workers_.size();
  for (std::size_t i = 0; i < n; ++i) {
    emit(reply_chunk((static_cast<std::size_t>(options_.shard) + i) % n, chunk, next, 0));
  }
}

void ShardState::push_async(int rank, const wire::Header& header, const Buffer& payload,
                            std::size_t chunk) {
  Worker& w = workers_[rank];
  std::string why;
  if (!w.pushing && header.step < w.clock) {
    why = "worker " + std::to_string(rank) + " pushed step " + std::to_string(header.step) +
          " after step " + std::to_string(w.clock - 1) + ": steps must increase";
  } else if (w.pushing && header.step != *w.pushing) {
    why = "worker " + std::to_string(rank) + " pushed step " + std::to_string(header.step) +
          " before every chunk of step " + std::to_string(*w.pushing) + " arrived";
  } else if (w.got[chunk]) {
    why = "worker " + std::to_string(rank) + " pushed chunk " + std::to_string(chunk) +
          " of step " + std::to_string(header.step) + " twice";
  }
  if (!why.empty()) {
    return answer_error(w.peer, why);
  }
  if (!w.pushing) {
    // The first chunk of step t. Staleness in SSP's terms: the worker computed step t on
    // parameters holding every worker's updates for steps < read_clock. Sync makes it 0; the
    // ssp hold below keeps it <= s.
    w.pushing = header.step;
    const std::uint64_t lag = header.step - std::min(header.step, w.read_clock);
    w.staleness = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(lag, std::numeric_limits<std::uint32_t>::max()));
    // SSP: the worker may start step t + 1 only while it is at most s steps ahead of the
    // slowest worker's current step. If that already holds now, it can only keep holding
    // (clocks only grow), so each chunk is answered as soon as it is applied; otherwise the
    // answer waits for the whole step (and maybe for the slowest: release_held).
    const std::uint64_t slowest = slowest_clock_if(rank, header.step + 1);
    w.streaming = options_.mode != Mode::kSsp || header.step + 1 <= slowest + options_.staleness;
    // What the replies will hold includes every update of steps below the slowest clock now
    // (this worker's own step t included: each chunk is answered after it is applied).
    if (w.streaming) w.read_clock = slowest;
  }
  w.got[chunk] = true;
  ++w.got_count;
  // Each chunk of the gradient is applied as it is, as one SGD step of its own: each worker's
  // gradient is already the mean over its batch, so this is Hogwild/Downpour's rule (one
  // optimizer step per push). Scaling by 1/N would instead make N pushes move as far as one
  // sync step.
  store_.apply(chunk, std::span<const Buffer>(&payload, 1));
  if (w.streaming) emit(reply_chunk(rank, chunk, version_, w.staleness));
  if (w.got_count < store_.chunks().size()) return;

  // Every chunk of step t arrived: the worker's step counts as pushed.
  ++version_;
  w.clock = *w.pushing + 1;
  w.pushing.reset();
  std::fill(w.got.begin(), w.got.end(), false);
  w.got_count = 0;
  if (!w.streaming) {
    const bool hold = w.clock > slowest_clock(w.clock) + options_.staleness;
    if (hold) {
      w.held_staleness = w.staleness;
      w.held_since = w.last_push;  // this push's arrival
    } else {
      reply(rank, w.staleness);
    }
  }
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
  for (std::size_t c = 0; c < store_.chunks().size(); ++c) {
    emit(reply_chunk(rank, c, version_, staleness));
  }
}

Outgoing ShardState::reply_chunk(int rank, std::size_t chunk, std::uint64_t step,
                                 std::uint32_t staleness) const {
  const ParamStore::Chunk c = store_.chunks()[chunk];
  return {workers_[rank].peer,
          wire::make_header(MessageType::kReply, options_.shard, step, range_.begin + c.begin,
                            range_.begin + c.end, c.size() * sizeof(float), staleness),
          store_.snapshot(c)};
}

bool ShardState::checkpoint_due(std::uint64_t step) const {
  const std::int64_t every = options_.checkpoint_every;
  const auto t = static_cast<std::int64_t>(step);
  return every > 0 && (t % every == 0 || t == options_.checkpoint_last_step);
}

void ShardState::write_checkpoint() const {
  CheckpointPart part;
  part.step = version_;
  part.total = options_.model_size;
  part.begin = range_.begin;
  part.end = range_.end;
  part.description = options_.checkpoint_description;
  part.params.assign(store_.values().begin(), store_.values().end());
  part.momentum.resize(range_.size());
  part.optimizer_steps = store_.save_optimizer(part.momentum);
  const std::string folder = checkpoint_step_folder(options_.checkpoint_root, version_);
  write_checkpoint_part(
      (std::filesystem::path(folder) / checkpoint_part_name(options_.shard, options_.shards))
          .string(),
      part);
  // The run's settings, once per step (worker/checkpoints.h: training_settings).
  if (options_.shard == 0 && !options_.checkpoint_settings.empty()) {
    const std::string problem = write_checkpoint_settings(folder, options_.checkpoint_settings);
    if (!problem.empty()) {
      log(name() + ": " + problem + " (the checkpoint part itself is complete)");
    }
  }
}

}  // namespace gradsync
