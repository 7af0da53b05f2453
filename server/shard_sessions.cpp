#include "server/shard_sessions.h"

#include <algorithm>

#include "common/error.h"
#include "common/run_id.h"

namespace gradsync {

using wire::MessageType;

ShardSessions::ShardSessions(const PsShardOptions& options, Clock::time_point now,
                             const ShardOutput& out)
    : model_size_(options.model_size),
      run_id_(options.run_id),
      timeout_(options.timeout),
      continue_without_dead_workers_(options.continue_without_dead_workers),
      out_(out),
      started_(now),
      workers_(options.world_size) {}

std::string ShardSessions::join(const std::string& peer, const wire::Header& hello,
                                Clock::time_point now, const std::string& address) {
  const std::uint32_t rank = hello.sender;
  const std::uint32_t n = workers_.size();
  const std::string who = "worker " + std::to_string(rank);
  std::string why;
  if (hello.step != run_id_) {
    // Checked first: whatever else it says, a process of another run is no one's fault here.
    why = who + ": of another run (run id " + run_id_text(hello.step) + ", this shard serves run " +
          run_id_text(run_id_) + ")";
  } else if (const auto it = rank_of_peer_.find(peer); it != rank_of_peer_.end()) {
    why = who + ": this connection already said HELLO as worker " + std::to_string(it->second);
  } else if (rank >= n) {
    why = who + ": rank out of range, this shard serves world size " + std::to_string(n) +
          " (ranks 0.." + std::to_string(n - 1) + ")";
  } else if (hello.aux != n) {
    why = who + ": world size " + std::to_string(hello.aux) + ", this shard serves world size " +
          std::to_string(n);
  } else if (hello.key_begin != 0 || hello.key_end != model_size_) {
    why = who + ": model has " + std::to_string(hello.key_end - hello.key_begin) +
          " parameters, this shard serves a model of " + std::to_string(model_size_);
  } else if (workers_[rank].presence == Presence::kConnected) {
    const std::string& from = workers_[rank].address;
    why = who + ": rank already connected" + (from.empty() ? "" : " (from " + from + ")");
  } else if (workers_[rank].presence != Presence::kAbsent) {
    why = who + ": rank already left the run";
  }
  if (!why.empty()) return why;
  Session& w = workers_[rank];
  w.presence = Presence::kConnected;
  w.peer = peer;
  w.address = address;
  w.last_seen = now;
  w.last_push = now;  // a worker's first push follows its HELLO by a step's compute
  rank_of_peer_[peer] = static_cast<int>(rank);
  return "";
}

std::string ShardSessions::heartbeat(const wire::Header& beat, Clock::time_point now) {
  // Heartbeats come on the client's own heartbeat connection, never the one that said HELLO,
  // so they are matched by rank, and by run: another run's must not keep a dead worker alive.
  if (beat.step != run_id_) {
    return "of another run (run id " + run_id_text(beat.step) + ", this shard serves run " +
           run_id_text(run_id_) + ")";
  }
  const std::uint32_t sender = beat.sender;
  if (sender >= workers_.size()) return "no worker of that rank has said HELLO";
  Session& w = workers_[sender];
  if (w.presence == Presence::kConnected) w.last_seen = now;
  // A late one after BYE is harmless.
  return w.presence == Presence::kAbsent ? "no worker of that rank has said HELLO" : "";
}

ShardSessions::Admission ShardSessions::admit(const std::string& peer, const wire::Header& header,
                                              Clock::time_point now) {
  const auto found = rank_of_peer_.find(peer);
  if (found == rank_of_peer_.end()) {
    return {-1, header.to_string() + ": this connection has not said HELLO", ""};
  }
  const int rank = found->second;
  Session& w = workers_[rank];
  if (header.sender != static_cast<std::uint32_t>(rank)) {
    return {-1,
            header.to_string() + ": this connection said HELLO as worker " + std::to_string(rank),
            ""};
  }
  if (w.presence == Presence::kDropped) {
    // It was given up for dead and the run went on without it; tell it rather than ignore it.
    return {-1, "",
            "worker " + std::to_string(rank) +
                " was dropped from the run after a silence longer than the timeout"};
  }
  if (w.presence != Presence::kConnected) {
    return {-1, header.to_string() + ": worker " + std::to_string(rank) + " already left", ""};
  }
  w.last_seen = now;
  if (header.type == MessageType::kPushPull) w.last_push = now;
  return {rank, "", ""};
}

void ShardSessions::leave(int rank) { workers_[rank].presence = Presence::kLeft; }

std::optional<ShardFailure> ShardSessions::check_silence(
    Clock::time_point now, const std::function<std::uint64_t(int)>& step_of,
    const std::function<void(int)>& dropped) {
  std::string absent;
  int first_absent = -1;
  for (std::size_t r = 0; r < workers_.size(); ++r) {
    if (workers_[r].presence != Presence::kAbsent) continue;
    absent += (absent.empty() ? "" : ", ") + std::to_string(r);
    if (first_absent < 0) first_absent = r;
  }
  if (first_absent >= 0 && now - started_ > timeout_) {
    return ShardFailure{
        first_absent, "", out_.name() + " waiting for HELLO",
        "worker(s) " + absent + " did not say HELLO within " + seconds_text(timeout_), true};
  }
  for (std::size_t r = 0; r < workers_.size(); ++r) {
    Session& w = workers_[r];
    const int rank = static_cast<int>(r);
    if (w.presence != Presence::kConnected || now - w.last_seen <= timeout_) continue;
    const std::string what = "worker " + std::to_string(r) + " (last seen " +
                             seconds_text(now - w.last_seen) + " ago) stopped sending";
    // Dropping needs another worker that still trains, or one that finished its training (in
    // async mode the others may be done before this one's silence runs out): with only the
    // dropped left, nobody would have trained the run to its end.
    const bool run_goes_on = std::any_of(workers_.begin(), workers_.end(), [&](const Session& o) {
      return &o != &w && (o.presence == Presence::kConnected || o.presence == Presence::kLeft);
    });
    if (!continue_without_dead_workers_ || !run_goes_on) {
      return ShardFailure{rank, w.address, out_.name() + " step " + std::to_string(step_of(rank)),
                          what + ": ending the run", true};
    }
    w.presence = Presence::kDropped;
    out_.log(out_.name() + ": " + what + ": dropped, the run goes on without it");
    dropped(rank);  // it may have been the slowest, that others' replies wait for
  }
  return std::nullopt;
}

bool ShardSessions::alive(int rank, Clock::time_point now) const {
  return now - workers_[rank].last_seen <= timeout_ / 2;
}

std::string ShardSessions::laggards(const std::function<bool(int)>& owes, Clock::time_point now,
                                    int& first) const {
  std::string text;
  first = -1;
  for (std::size_t r = 0; r < workers_.size(); ++r) {
    const Session& w = workers_[r];
    const int rank = static_cast<int>(r);
    if (w.presence != Presence::kConnected || !alive(rank, now) || !owes(rank) ||
        now - w.last_push <= timeout_) {
      continue;
    }
    text += (text.empty() ? "" : ", ") + std::to_string(r);
    if (first < 0) first = rank;
  }
  return text;
}

bool ShardSessions::everyone_joined() const {
  return std::none_of(workers_.begin(), workers_.end(),
                      [](const Session& w) { return w.presence == Presence::kAbsent; });
}

bool ShardSessions::finished() const {
  return std::none_of(workers_.begin(), workers_.end(), [](const Session& w) {
    return w.presence == Presence::kAbsent || w.presence == Presence::kConnected;
  });
}

}  // namespace gradsync
