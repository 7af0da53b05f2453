// ConsistencyState: what every consistency policy (sync, async, ssp) works over: the range's
// parameters (ParamStore), the shard's version (updates applied since INIT, or since the
// checkpoint it resumed from), and each worker's clocks and the chunks of its current step
// that arrived. The policies decide when a push is applied and when replies go out; this holds
// what they decide on, and sends the replies.
//
//   ConsistencyState state(options, range, sessions, out);  // resumed: initialised already
//   state.initialise(init_payload);                         // rank 0's INIT, acknowledged
//   state.reply(rank, staleness);                           // the whole range, chunk by chunk
//   state.slowest_clock(fallback);                          // ssp's bound, staleness
//
// Clocks count steps (SSP's clocks): a worker's clock counts its steps whose every chunk was
// applied, so it is the step it computes now; its read clock is the slowest clock when it last
// received parameters, so a push of step t is t - read_clock stale. Workers that left or were
// dropped (ShardSessions::gone) no longer hold the slowest clock back; workers not yet
// connected do.
//
// Not thread-safe: the thread driving ShardState uses it. Replies share the parameter array
// (ParamStore::snapshot), so they stay valid however long ZeroMQ takes to send them.
// `sessions` and `out` must outlive it.
#pragma once

#include <cstdint>
#include <vector>

#include "server/key_range.h"
#include "server/message.h"
#include "server/param_store.h"
#include "server/shard_options.h"
#include "server/shard_output.h"
#include "server/shard_sessions.h"

namespace gradsync {

class ConsistencyState {
 public:
  struct Clocks {
    std::uint64_t clock = 0;       // steps whose every chunk was applied: it computes this one
    std::uint64_t read_clock = 0;  // slowest clock when it last received parameters
    std::vector<bool> got;         // the chunks of its current step that arrived
    std::size_t got_count = 0;
  };

  // A resumed shard (options.resume) is initialised from its checkpoint, at its step.
  ConsistencyState(const PsShardOptions& options, KeyRange range, const ShardSessions& sessions,
                   const ShardOutput& out);

  // Rank 0's INIT: sets the parameters and acknowledges them to rank 0.
  void initialise(const Buffer& payload);
  bool initialised() const { return initialised_; }

  std::uint64_t version() const { return version_; }
  // One more update is complete (sync: a step of every worker; async, ssp: one worker's step).
  void advance() { ++version_; }

  KeyRange range() const { return range_; }
  ParamStore& store() { return store_; }
  const ParamStore& store() const { return store_; }
  std::size_t chunks() const { return store_.chunks().size(); }

  int workers() const { return static_cast<int>(clocks_.size()); }
  Clocks& clocks(int rank) { return clocks_[rank]; }
  const Clocks& clocks(int rank) const { return clocks_[rank]; }
  // Chunk `chunk` of worker `rank`'s current step arrived.
  void arrived(int rank, std::size_t chunk);
  // Worker `rank`'s step is over: none of its next step's chunks has arrived.
  void clear_arrivals(int rank);

  std::uint64_t slowest_clock(std::uint64_t fallback) const;
  // The slowest clock if worker `rank` were at `clock` (ssp: may its next step start?).
  std::uint64_t slowest_clock_if(int rank, std::uint64_t clock) const;

  // The whole range to worker `rank` at the current version, one REPLY per chunk in order.
  void reply(int rank, std::uint32_t staleness);
  // Chunk `chunk` as one REPLY to worker `rank`, labelled with `step` and `staleness`.
  Outgoing reply_chunk(int rank, std::size_t chunk, std::uint64_t step,
                       std::uint32_t staleness) const;

 private:
  std::uint32_t shard_;
  KeyRange range_;
  const ShardSessions& sessions_;
  const ShardOutput& out_;
  ParamStore store_;
  std::vector<Clocks> clocks_;
  bool initialised_ = false;
  std::uint64_t version_ = 0;
};

}  // namespace gradsync
