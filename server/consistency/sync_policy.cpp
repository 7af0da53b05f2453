#include "server/consistency/sync_policy.h"

#include <filesystem>

#include "common/checkpoint_file.h"
#include "common/error.h"

namespace gradsync {

SyncPolicy::SyncPolicy(const PsShardOptions& options, ConsistencyState& state,
                       const ShardSessions& sessions, const ShardOutput& out)
    : ConsistencyPolicy(options, state, sessions, out),
      pushed_(state.workers(), std::vector<std::optional<Buffer>>(state.chunks())),
      chunk_pushes_(state.chunks(), 0) {}

std::optional<ShardFailure> SyncPolicy::push(int rank, const wire::Header& header,
                                             const Buffer& payload, std::size_t chunk) {
  const std::uint64_t version = state_.version();
  for (int r = 0; r < sessions_.size(); ++r) {
    if (sessions_.left(r)) {
      // An average over fewer workers would be a silently different answer, not a slower one.
      return ShardFailure{r, sessions_.address(r), out_.name() + " step " + std::to_string(version),
                          "worker " + std::to_string(r) + " left the run, step " +
                              std::to_string(version) + " cannot complete without it",
                          false};
    }
  }
  std::string why;
  if (header.step != version) {
    why = "worker " + std::to_string(rank) + " pushed step " + std::to_string(header.step) +
          ", this shard is at step " + std::to_string(version) +
          " (sync: every worker pushes every step once, in order)";
  } else if (state_.clocks(rank).got[chunk]) {
    // Also after the chunk was averaged and answered: `got` lasts until the step ends.
    why = "worker " + std::to_string(rank) + " pushed chunk " + std::to_string(chunk) +
          " of step " + std::to_string(header.step) + " twice";
  }
  if (!why.empty()) {
    out_.answer_error(sessions_.peer(rank), why);
    return std::nullopt;
  }
  state_.arrived(rank, chunk);
  if (pushes_this_step_++ == 0) {
    step_waiting_since_ = sessions_.last_push(rank);  // this push's arrival
  }
  pushed_[rank][chunk] = payload;  // kept, not copied: the frame itself waits for the others
  if (++chunk_pushes_[chunk] < state_.workers()) return std::nullopt;
  complete_chunk(chunk);
  return std::nullopt;
}

void SyncPolicy::complete_chunk(std::size_t chunk) {
  // Every worker pushed chunk c of this step: one Sgd step on it with the average (in rank
  // order, so the result does not depend on arrival order, and is the same as a whole-range
  // average: the update is element-wise), and the same new chunk to everyone at once, while
  // later chunks may still be arriving. Chunks complete in order: each worker pushes in order.
  std::vector<Buffer> grads;
  grads.reserve(pushed_.size());
  for (std::vector<std::optional<Buffer>>& each : pushed_) {
    grads.push_back(std::move(*each[chunk]));
    each[chunk].reset();
  }
  chunk_pushes_[chunk] = 0;
  state_.store().apply(chunk, grads);
  grads.clear();  // the frames go back to ZeroMQ now, not after the replies
  const std::uint64_t next = state_.version() + 1;  // the version these parameters now belong to
  if (++chunks_done_ == state_.chunks()) {
    // The step is complete once its last chunk is: everyone is at the next step. This happens
    // before the last chunk's replies leave, so no worker can push step `next` any earlier.
    state_.advance();
    chunks_done_ = 0;
    pushes_this_step_ = 0;
    for (int r = 0; r < state_.workers(); ++r) {
      ConsistencyState::Clocks& each = state_.clocks(r);
      each.clock = next;
      each.read_clock = next;
      state_.clear_arrivals(r);
    }
    // Before the last chunk's replies leave: no worker is past this step while it is written.
    if (checkpoint_due(next)) write_checkpoint();
  }
  // Shard k answers rank k mod N first, then the next ones: with K shards answering at once,
  // each worker's link then gets one shard's chunk at a time instead of all K together
  // (the workers stagger their pushes over the shards the same way, see PsClient).
  const std::size_t n = pushed_.size();
  for (std::size_t i = 0; i < n; ++i) {
    const auto rank = static_cast<int>((static_cast<std::size_t>(options_.shard) + i) % n);
    out_.send(state_.reply_chunk(rank, chunk, next, 0));
  }
}

std::optional<ShardFailure> SyncPolicy::worker_left(int rank) {
  if (pushes_this_step_ == 0) return std::nullopt;
  // Others already pushed this step and wait for an average that now cannot be formed.
  const std::string step = std::to_string(state_.version());
  return ShardFailure{rank, sessions_.address(rank), out_.name() + " step " + step,
                      "worker " + std::to_string(rank) + " left (BYE) while step " + step +
                          " waits for its gradient: ending the run",
                      false};
}

// The step's missing pushes: someone has waited since the step's first push, and the workers
// that have not pushed all of it are named if alive but with no push for as long.
std::optional<ShardFailure> SyncPolicy::check_progress(Clock::time_point now) const {
  const auto timeout = options_.timeout;
  if (pushes_this_step_ == 0 || now - step_waiting_since_ <= timeout) return std::nullopt;
  const std::size_t chunks = state_.chunks();
  int first = -1;
  const std::string who =
      sessions_.laggards([&](int r) { return state_.clocks(r).got_count < chunks; }, now, first);
  if (first < 0) return std::nullopt;
  const std::string step = std::to_string(state_.version());
  return ShardFailure{first, sessions_.address(first), out_.name() + " step " + step,
                      "step " + step + " waits for worker(s) " + who +
                          ", alive but with no push for over " + seconds_text(timeout) +
                          ": ending the run",
                      true};
}

bool SyncPolicy::checkpoint_due(std::uint64_t step) const {
  const std::int64_t every = options_.checkpoint_every;
  const auto t = static_cast<std::int64_t>(step);
  return every > 0 && (t % every == 0 || t == options_.checkpoint_last_step);
}

void SyncPolicy::write_checkpoint() const {
  const KeyRange range = state_.range();
  const ParamStore& store = state_.store();
  CheckpointPart part;
  part.step = state_.version();
  part.total = options_.model_size;
  part.begin = range.begin;
  part.end = range.end;
  part.description = options_.checkpoint_description;
  part.params.assign(store.values().begin(), store.values().end());
  part.momentum.resize(range.size());
  part.optimizer_steps = store.save_optimizer(part.momentum);
  const std::string folder = checkpoint_step_folder(options_.checkpoint_root, part.step);
  write_checkpoint_part(
      (std::filesystem::path(folder) / checkpoint_part_name(options_.shard, options_.shards))
          .string(),
      part);
  // The run's settings, once per step (worker/checkpoints.h: training_settings).
  if (options_.shard == 0 && !options_.checkpoint_settings.empty()) {
    const std::string problem = write_checkpoint_settings(folder, options_.checkpoint_settings);
    if (!problem.empty()) {
      out_.log(out_.name() + ": " + problem + " (the checkpoint part itself is complete)");
    }
  }
}

}  // namespace gradsync
