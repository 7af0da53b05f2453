// ShardState: a parameter-server shard's protocol logic, from one received message to the
// replies it causes, with no sockets in it (ps-lite's KVServer handle, minus the Van). PsShard
// feeds it from a ZeroMQ ROUTER; tests feed it directly.
//
//   ShardState state(options, now);
//   auto send = [&](Outgoing&& out) { ... };   // hands each reply to the socket at once
//   state.on_message(peer, frames, now, address, send);    // per message
//   state.on_tick(now, send);                              // every ~100 ms
//   if (state.failure()) throw ...;   if (state.finished()) return;
//
// Replies go to `send` as they are ready, not at the end, because a parameter reply is several
// REPLY messages (one per chunk, tiling the range in order: see wire_format.h) and chunk c should
// be on the wire while chunk c + 1 is still arriving or being updated. The overloads returning
// a vector collect them (tests).
//
// `peer` is the routing id of the connection the message came on; `frames` are the header
// frame and at most one payload frame (present exactly when header.payload_bytes > 0).
//
// What it does, per message type (the wire format is common/wire_format.h):
//   HELLO      checks rank, world size, model size and wire version; ERROR with the reason,
//              or HELLO_ACK with this shard's key range. Binds the rank to `peer`.
//   INIT       rank 0's initial parameters; REPLY with an empty range (no parameters). PULLs
//              and PUSHPULLs that came before it are held, then answered in arrival order.
//              Start gate: INIT, PULLs and PUSHPULLs are answered only once every worker has
//              said HELLO (a resumed shard, initialised from its checkpoint, too), so each
//              worker's first exchange ends after all have joined: the run's one common
//              moment at start, as DDP's initial broadcast is (workers under other launchers
//              take it as time zero).
//   PULL       REPLY (in chunks) with the current parameters.
//   PUSHPULL   one chunk of a worker's gradient for its step (the key range names the chunk);
//              a worker pushes every chunk of its step, in order, before its next step. An
//              encoded push (fp16, bf16, top-k: aux) is decoded into the chunk's fp32
//              gradient on arrival (push_decoder.h), before any rule below sees it; one that
//              cannot be decoded (a top-k index outside the chunk) is answered with an ERROR.
//              sync: held until all N workers pushed chunk c of this step; then one Sgd step
//              on chunk c with the average (in rank order) and chunk c's REPLY to each worker,
//              while later chunks may still be arriving; the step ends when every chunk did.
//              A chunk pushed twice in a step, or a step other than the shard's, is answered
//              with an ERROR. async: each chunk is one Sgd step on that chunk with this
//              gradient, answered at once with its REPLY. ssp: as async, but the worker's step
//              counts as pushed (its clock advances) once all its chunks arrived, and its
//              replies are held while its next step would be more than `staleness` steps ahead
//              of the slowest worker's (then the whole range is answered at once on release).
//   HEARTBEAT  marks the rank alive (it comes from the client's second socket: matched by rank).
//   BYE        the worker leaves; finished() once all N have left.
// Anything else (undecodable, wrong frame count or payload size, a range not this shard's or a
// PUSHPULL range not one of its chunks, a connection that did not say HELLO, a type a shard
// never receives) is logged as one line,
// "shard 0: rejected message from <peer hex>: <reason>", and dropped without a reply.
//
// Staleness, sent in each REPLY's aux, is counted in steps (SSP's clocks): a push of step t
// computed on parameters that held every worker's updates for steps < c is t - c stale. A
// worker's clock counts its steps whose every chunk was applied.
//
// Liveness (on_tick): a connected worker silent for longer than options.timeout ends the run
// (ERROR to every connected worker, failure() set), except in async or ssp mode with
// continue_without_dead_workers, where it is dropped and the others carry on. Workers that
// have not said HELLO within options.timeout of construction end the run the same way, and so
// does a worker leaving (BYE) a sync run that still needs its gradient. A worker alive (its
// heartbeats arrive) but not taking part ends the run too, named, once others have waited on it
// for options.timeout with no push from it: rank 0's INIT that PULLs wait for, a sync step's
// missing pushes, or the slowest worker an ssp reply is held for.
//
// How it is built: ShardState is the coordinator. It checks each message's frames, header and
// keys, and routes it: the session rules (HELLO, HEARTBEAT, who may send, BYE, silence, dropping
// dead workers) are ShardSessions' (shard_sessions.h); the consistency rules (when a pushed
// chunk is applied, when its replies go out, whom a waiting worker waits for) are one
// ConsistencyPolicy per mode (consistency/sync_policy.h, async_policy.h, ssp_policy.h) over a
// ConsistencyState they share (the parameters, the version, the workers' clocks). What joins
// the two stays here (shard_start.cpp): INIT and the start gate, with the requests held until
// it opens. Replies, ERRORs and log lines all go out through one ShardOutput (shard_output.h,
// which also defines ShardFailure).
//
// Not thread-safe: one thread drives it. Reply payloads share the parameter array (see
// ParamStore); received Buffers are kept (sync mode holds a step's pushes) until used. Neither
// copyable nor movable: its parts refer to each other.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "server/consistency/consistency_policy.h"
#include "server/consistency/consistency_state.h"
#include "server/key_range.h"
#include "server/message.h"
#include "server/param_store.h"
#include "server/shard_options.h"
#include "server/shard_output.h"
#include "server/shard_sessions.h"
#include "server/shard_trace.h"

namespace gradsync {

class ShardState {
 public:
  using Clock = std::chrono::steady_clock;

  using Sink = ShardOutput::Sink;

  ShardState(const PsShardOptions& options, Clock::time_point now);
  ShardState(const ShardState&) = delete;
  ShardState& operator=(const ShardState&) = delete;

  // `address` is the peer's network address when the transport knows it (for messages).
  void on_message(const std::string& peer, std::span<const Buffer> frames, Clock::time_point now,
                  const std::string& address, const Sink& send);
  // `in_transit`: messages are still queued on an emulated link (PsShard's), in or out. A worker
  // that seems to hold the others up may then only be waiting behind them, so the progress
  // checks (see Liveness) wait until the queues are empty.
  void on_tick(Clock::time_point now, const Sink& send, bool in_transit = false);
  // A clean stop (PsShard::stop): ERROR "<reason>" to every connected worker.
  void on_stop(const std::string& reason, const Sink& send);

  std::vector<Outgoing> on_message(const std::string& peer, std::span<const Buffer> frames,
                                   Clock::time_point now, const std::string& address = "");
  std::vector<Outgoing> on_tick(Clock::time_point now);

  bool finished() const;
  const std::optional<ShardFailure>& failure() const { return failure_; }

  KeyRange range() const { return range_; }
  std::uint64_t version() const { return params_.version(); }  // updates applied since INIT
  bool initialised() const { return params_.initialised(); }
  std::span<const float> params() const { return params_.store().values(); }
  const ParamStore& store() const { return params_.store(); }
  std::uint64_t rejected() const { return rejected_; }

 private:
  struct Deferred {  // a PULL or PUSHPULL that came before INIT (or before every HELLO)
    int rank;
    wire::Header header;
    Buffer payload;     // PUSHPULL: already decoded (fp32)
    std::size_t chunk;  // PUSHPULL: which of the range's chunks
    Clock::time_point since;
  };

  // Message intake and routing (shard_state.cpp).
  void dispatch(const std::string& peer, const wire::Header& header, const Buffer& payload,
                Clock::time_point now, const std::string& address);
  void hello(const std::string& peer, const wire::Header& header, Clock::time_point now,
             const std::string& address);
  // A PUSHPULL's payload as its chunk's fp32 gradient (push_decoder.h), or nothing when it
  // cannot be one: then the worker was answered with an ERROR.
  std::optional<Buffer> decode(int rank, const wire::Header& header, const Buffer& payload,
                               std::size_t chunk);
  // `grad`: decoded.
  void push(int rank, const wire::Header& header, const Buffer& grad, std::size_t chunk);
  void bye(int rank);
  std::optional<std::size_t> chunk_of(const wire::Header& header) const;
  void fail(ShardFailure failure);
  void refuse(const std::string& peer, const std::string& address, const std::string& why);
  void reject(const std::string& peer, const std::string& reason);

  // INIT and the start gate (shard_start.cpp).
  // A PULL or PUSHPULL that came before the gate opened: held, unless its sender floods.
  void hold(const std::string& peer, Deferred request);
  void init(int rank, const Buffer& payload);
  void apply_init(const Buffer& payload);
  // Called when the last HELLO arrives: the held INIT, or a resumed shard's held requests.
  void open_start_gate();
  void answer_deferred();
  // The start gate's progress check: held requests waiting for rank 0's INIT.
  void check_init(Clock::time_point now);

  PsShardOptions options_;
  KeyRange range_;
  ShardOutput out_;
  ShardSessions sessions_;
  ConsistencyState params_;
  std::unique_ptr<ConsistencyPolicy> policy_;  // the mode's
  std::deque<Deferred> before_init_;
  std::optional<Buffer> pending_init_;  // rank 0's INIT, held at the start gate
  std::optional<ShardFailure> failure_;
  std::uint64_t rejected_ = 0;
  ShardTrace trace_;  // receive and apply spans (PsShard records the replies)
};

}  // namespace gradsync
