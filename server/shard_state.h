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
//              a worker pushes every chunk of its step, in order, before its next step.
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
// Not thread-safe: one thread drives it. Reply payloads share the parameter array (see
// ParamStore); received Buffers are kept (sync mode holds a step's pushes) until used.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "server/key_range.h"
#include "server/message.h"
#include "server/param_store.h"
#include "server/shard_options.h"

namespace gradsync {

// Why the shard ended the run, for PsShard::serve() to throw as a PeerError / TimeoutError.
struct ShardFailure {
  int rank = -1;          // the worker at fault, -1 for none in particular
  std::string address;    // its network address when known ("127.0.0.1"), else ""
  std::string operation;  // "shard 0 step 14"
  std::string problem;    // what went wrong, one line
  bool timeout = false;   // a wait ran out (silence, HELLO, a worker holding the others up),
                          // rather than a protocol violation
};

class ShardState {
 public:
  using Clock = std::chrono::steady_clock;

  using Sink = std::function<void(Outgoing&&)>;

  ShardState(const PsShardOptions& options, Clock::time_point now);

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
  std::uint64_t version() const { return version_; }  // updates applied since INIT
  bool initialised() const { return initialised_; }
  std::span<const float> params() const { return store_.values(); }
  const ParamStore& store() const { return store_; }
  std::uint64_t rejected() const { return rejected_; }

 private:
  enum class Presence { kAbsent, kConnected, kLeft, kDropped };
  struct Worker {
    Presence presence = Presence::kAbsent;
    std::string peer;
    std::string address;
    Clock::time_point last_seen;
    std::uint64_t clock = 0;       // steps whose every chunk was applied: it computes this one
    std::uint64_t read_clock = 0;  // slowest clock when it last received parameters
    std::vector<bool> got;         // the chunks of its current step that arrived
    std::size_t got_count = 0;
    std::vector<std::optional<Buffer>> pushed;    // sync: per chunk, held until all N pushed it
    std::optional<std::uint64_t> pushing;         // async, ssp: the step whose chunks arrive
    bool streaming = false;                       // async, ssp: answer each chunk as applied
    std::uint32_t staleness = 0;                  // async, ssp: of the step being pushed
    std::optional<std::uint32_t> held_staleness;  // ssp: a reply waiting for the slowest
    Clock::time_point held_since;                 // ssp: when that reply began to wait
    Clock::time_point last_push;                  // its last PUSHPULL (or HELLO) arrived
  };
  struct Deferred {  // a PULL or PUSHPULL that came before INIT (or before every HELLO)
    int rank;
    wire::Header header;
    Buffer payload;
    std::size_t chunk;  // PUSHPULL: which of the range's chunks
    Clock::time_point since;
  };

  // Message intake (shard_state.cpp).
  void dispatch(const std::string& peer, const wire::Header& header, const Buffer& payload,
                Clock::time_point now, const std::string& address);
  void hello(const std::string& peer, const wire::Header& header, Clock::time_point now,
             const std::string& address);
  void bye(int rank);
  void fail(ShardFailure failure);

  // Liveness (shard_liveness.cpp), from on_tick.
  void check_silence(Clock::time_point now);
  void check_progress(Clock::time_point now);
  bool alive(const Worker& w, Clock::time_point now) const;
  std::string laggards(const std::function<bool(const Worker&)>& owes, Clock::time_point now,
                       int& first) const;
  void refuse(const std::string& peer, const std::string& address, const std::string& why);

  // Parameters and updates (shard_updates.cpp).
  void init(int rank, const Buffer& payload);
  void apply_init(const Buffer& payload);
  // Every worker has said HELLO (none still absent): the start gate is open.
  bool everyone_joined() const;
  // Called when the last HELLO arrives: the held INIT, or a resumed shard's held requests.
  void open_start_gate();
  void answer_deferred();
  void push_pull(int rank, const wire::Header& header, const Buffer& payload, std::size_t chunk);
  void push_sync(int rank, const wire::Header& header, const Buffer& payload, std::size_t chunk);
  void push_async(int rank, const wire::Header& header, const Buffer& payload, std::size_t chunk);
  void release_held();
  void reply(int rank, std::uint32_t staleness);
  Outgoing reply_chunk(int rank, std::size_t chunk, std::uint64_t step,
                       std::uint32_t staleness) const;
  std::optional<std::size_t> chunk_of(const wire::Header& header) const;
  bool checkpoint_due(std::uint64_t step) const;
  void write_checkpoint() const;

  void emit(Outgoing&& out) { (*send_)(std::move(out)); }
  Outgoing error_to(const std::string& peer, const std::string& text) const;
  // A request the protocol forbids from a known worker: logged, and answered with an ERROR
  // saying why (the worker then fails with that reason instead of waiting).
  void answer_error(const std::string& peer, const std::string& why) {
    log(name() + ": " + why);
    emit(error_to(peer, why));
  }
  std::uint64_t slowest_clock(std::uint64_t fallback) const;
  // The slowest clock if worker `rank` were at `clock` (ssp: may its next step start?).
  std::uint64_t slowest_clock_if(int rank, std::uint64_t clock) const;
  void reject(const std::string& peer, const std::string& reason);
  void log(const std::string& line) const;
  std::string name() const { return "shard " + std::to_string(options_.shard); }

  PsShardOptions options_;
  KeyRange range_;
  Clock::time_point started_;
  ParamStore store_;
  std::vector<Worker> workers_;
  std::map<std::string, int> rank_of_peer_;
  std::deque<Deferred> before_init_;
  std::optional<Buffer> pending_init_;  // rank 0's INIT, held at the start gate
  bool initialised_ = false;
  std::uint64_t version_ = 0;
  // sync: per chunk, how many workers pushed it this step; chunks updated and answered; and
  // chunk messages received this step (a worker leaving then breaks the step).
  std::vector<int> chunk_pushes_;
  std::size_t chunks_done_ = 0;
  std::uint64_t pushes_this_step_ = 0;
  Clock::time_point step_waiting_since_;  // the step's first push: someone waits from then
  std::optional<ShardFailure> failure_;
  std::uint64_t rejected_ = 0;
  const Sink* send_ = nullptr;  // the current call's sink
};

}  // namespace gradsync
