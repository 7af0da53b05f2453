// ShardSessions: a shard's session rules, whatever the consistency mode: which worker said
// HELLO on which connection, the start gate's membership half (has every worker joined?), when
// each was last heard from (any message or HEARTBEAT) and last pushed, BYE, and the silence
// check that ends the run or, with continue_without_dead_workers, drops a dead worker.
//
//   ShardSessions sessions(options, now, out);
//   std::string why = sessions.join(peer, hello, now, address);  // "" or the refusal
//   sessions.heartbeat(header.sender, now);                       // from the second socket
//   auto who = sessions.admit(peer, header, now);                 // every other message
//   if (auto failure = sessions.check_silence(now, step_of, dropped)) ...;  // every tick
//
// A worker's presence only moves forward: absent, then connected, then left (BYE) or dropped
// (silent too long, and the run goes on without it). Nothing here touches parameters: a worker
// leaving or being dropped is for the consistency policy to act on (ShardState tells it).
//
// Liveness: a connected worker silent for longer than options.timeout ends the run, except with
// continue_without_dead_workers (async and ssp only: validate() refuses it in sync), where it
// is dropped while another worker is still connected; workers that have not said HELLO within
// options.timeout of construction end the run too. alive() and laggards() serve the progress
// checks (ShardState's and the policies'), which name a worker alive but not taking part.
//
// Not thread-safe: the thread driving ShardState calls it. Nothing blocks; time is what the
// caller passes in. `out` must outlive it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/wire_format.h"
#include "server/shard_options.h"
#include "server/shard_output.h"

namespace gradsync {

class ShardSessions {
 public:
  using Clock = std::chrono::steady_clock;

  ShardSessions(const PsShardOptions& options, Clock::time_point now, const ShardOutput& out);

  // A HELLO on connection `peer`: checks rank, world size and model size, and that neither the
  // connection nor the rank is taken, then binds the rank to `peer`. Returns the refusal, or ""
  // once joined.
  std::string join(const std::string& peer, const wire::Header& hello, Clock::time_point now,
                   const std::string& address);
  // A HEARTBEAT: marks its sender alive. Returns why it is rejected (another run's id, or no
  // worker of that rank has said HELLO), or "" once counted; a late one after BYE is harmless.
  std::string heartbeat(const wire::Header& beat, Clock::time_point now);

  // Who sent a message (other than HELLO and HEARTBEAT) on connection `peer`. A connected
  // worker is marked as heard from (and as having pushed, for a PUSHPULL) and its rank
  // returned; otherwise `rejection` (log and drop it) or `answer` (an ERROR to the sender: it
  // was dropped) says why not.
  struct Admission {
    int rank = -1;
    std::string rejection;
    std::string answer;
  };
  Admission admit(const std::string& peer, const wire::Header& header, Clock::time_point now);

  void leave(int rank);  // BYE

  // Every tick. Returns the failure that ends the run, if any; `step_of(rank)` names the step
  // a silent worker is at, and `dropped(rank)` is called for each worker given up for dead.
  std::optional<ShardFailure> check_silence(Clock::time_point now,
                                            const std::function<std::uint64_t(int)>& step_of,
                                            const std::function<void(int)>& dropped);

  // Heard from (a heartbeat at least) within half the timeout: one that is silent longer may be
  // dead, and check_silence() says so, or drops it, within the other half.
  bool alive(int rank, Clock::time_point now) const;
  // The connected, alive workers that `owes` names and that pushed nothing for over the
  // timeout, as "2, 3"; `first` is the lowest of them, -1 for none.
  std::string laggards(const std::function<bool(int)>& owes, Clock::time_point now,
                       int& first) const;

  // Every worker has said HELLO (none still absent): the start gate may open.
  bool everyone_joined() const;
  // Every worker left or was dropped.
  bool finished() const;

  int size() const { return static_cast<int>(workers_.size()); }
  bool connected(int rank) const { return workers_[rank].presence == Presence::kConnected; }
  bool left(int rank) const { return workers_[rank].presence == Presence::kLeft; }
  // Left or dropped: it takes no further part, and its clock holds no one back.
  bool gone(int rank) const {
    return workers_[rank].presence == Presence::kLeft ||
           workers_[rank].presence == Presence::kDropped;
  }
  // The connection that said HELLO as `rank` (kept after it left: a late reply goes nowhere).
  const std::string& peer(int rank) const { return workers_[rank].peer; }
  const std::string& address(int rank) const { return workers_[rank].address; }
  // When its last PUSHPULL (or its HELLO) arrived.
  Clock::time_point last_push(int rank) const { return workers_[rank].last_push; }

 private:
  enum class Presence { kAbsent, kConnected, kLeft, kDropped };
  struct Session {
    Presence presence = Presence::kAbsent;
    std::string peer;
    std::string address;
    Clock::time_point last_seen;
    Clock::time_point last_push;  // its last PUSHPULL (or HELLO) arrived
  };

  std::uint64_t model_size_;
  std::uint64_t run_id_;  // a HELLO or heartbeat of another is refused
  std::chrono::milliseconds timeout_;
  bool continue_without_dead_workers_;
  const ShardOutput& out_;
  Clock::time_point started_;
  std::vector<Session> workers_;
  std::map<std::string, int> rank_of_peer_;
};

}  // namespace gradsync
