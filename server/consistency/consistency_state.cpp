#include "server/consistency/consistency_state.h"

#include <algorithm>
#include <optional>

namespace gradsync {

using wire::MessageType;

ConsistencyState::ConsistencyState(const PsShardOptions& options, KeyRange range,
                                   const ShardSessions& sessions, const ShardOutput& out)
    : shard_(options.shard),
      range_(range),
      sessions_(sessions),
      out_(out),
      store_(range.size(), options.sgd),
      clocks_(options.world_size) {
  for (Clocks& w : clocks_) w.got.assign(store_.chunks().size(), false);
  if (options.resume) {
    // A resumed shard is initialised from its checkpoint, at that checkpoint's step.
    const PsShardOptions::Start& start = *options.resume;
    store_.restore(start.params, start.momentum, start.optimizer_steps);
    initialised_ = true;
    version_ = start.step;
    for (Clocks& w : clocks_) w.clock = w.read_clock = version_;
  }
}

void ConsistencyState::initialise(const Buffer& payload) {
  store_.set(payload.bytes);
  initialised_ = true;
  // Rank 0 already holds these parameters: the acknowledgement is a REPLY of an empty range.
  out_.send(
      {sessions_.peer(0),
       wire::make_header(MessageType::kReply, shard_, version_, range_.begin, range_.begin, 0),
       {}});
  clocks_[0].read_clock = slowest_clock(0);
}

void ConsistencyState::arrived(int rank, std::size_t chunk) {
  Clocks& w = clocks_[rank];
  w.got[chunk] = true;
  ++w.got_count;
}

void ConsistencyState::clear_arrivals(int rank) {
  Clocks& w = clocks_[rank];
  std::fill(w.got.begin(), w.got.end(), false);
  w.got_count = 0;
}

std::uint64_t ConsistencyState::slowest_clock_if(int rank, std::uint64_t clock) const {
  std::uint64_t slowest = clock;
  for (int r = 0; r < workers(); ++r) {
    if (r == rank || sessions_.gone(r)) continue;
    slowest = std::min(slowest, clocks_[r].clock);
  }
  return slowest;
}

std::uint64_t ConsistencyState::slowest_clock(std::uint64_t fallback) const {
  // Workers not yet connected count at clock 0: SSP holds everyone until they join.
  std::optional<std::uint64_t> slowest;
  for (int r = 0; r < workers(); ++r) {
    if (sessions_.gone(r)) continue;
    slowest = std::min(slowest.value_or(clocks_[r].clock), clocks_[r].clock);
  }
  return slowest.value_or(fallback);
}

void ConsistencyState::reply(int rank, std::uint32_t staleness) {
  // What the worker now holds includes every update of steps below the slowest clock.
  clocks_[rank].read_clock = slowest_clock(clocks_[rank].clock);
  for (std::size_t c = 0; c < store_.chunks().size(); ++c) {
    out_.send(reply_chunk(rank, c, version_, staleness));
  }
}

Outgoing ConsistencyState::reply_chunk(int rank, std::size_t chunk, std::uint64_t step,
                                       std::uint32_t staleness) const {
  const ParamStore::Chunk c = store_.chunks()[chunk];
  return {sessions_.peer(rank),
          wire::make_header(MessageType::kReply, shard_, step, range_.begin + c.begin,
                            range_.begin + c.end, c.size() * sizeof(float), staleness),
          store_.snapshot(c), rank};
}

}  // namespace gradsync
