#include "server/shard_state.h"

#include <algorithm>
#include <cstdio>

namespace gradsync {
namespace {

using wire::MessageType;
using Mode = PsShardOptions::Mode;

constexpr std::uint64_t kLoggedRejections = 100;    // then every 1000th, so a flood cannot
constexpr std::uint64_t kRejectionLogEvery = 1000;  // bury the log or slow the shard down
constexpr long kMaxDeferredPerWorker = 8;           // requests held for INIT, per worker

// decode_header() refuses a frame of another wire version before reading its type, but a
// HELLO of another version deserves an answer saying so, or that worker would only time out.
// Reads the two fields straight from the layout in wire_format.h.
std::optional<std::uint16_t> foreign_hello_version(std::span<const std::byte> frame) {
  if (frame.size() != wire::kHeaderBytes) return std::nullopt;
  auto u16 = [&](std::size_t at) {
    return static_cast<std::uint16_t>(static_cast<unsigned>(frame[at]) |
                                      static_cast<unsigned>(frame[at + 1]) << 8);
  };
  const std::uint32_t magic = u16(0) | static_cast<std::uint32_t>(u16(2)) << 16;
  if (magic != wire::kMagic || u16(4) == wire::kWireVersion) return std::nullopt;
  if (u16(6) != static_cast<std::uint16_t>(MessageType::kHello)) return std::nullopt;
  return u16(4);
}

}  // namespace

ShardState::ShardState(const PsShardOptions& options, Clock::time_point now)
    : options_((validate(options), options)),
      range_(balanced_ranges(options.model_size, options.shards)[options.shard]),
      started_(now),
      store_(range_.size(), options.sgd),
      workers_(options.world_size),
      chunk_pushes_(store_.chunks().size(), 0) {
  for (Worker& w : workers_) {
    w.got.assign(store_.chunks().size(), false);
    w.pushed.resize(store_.chunks().size());
  }
  if (options_.resume) {
    // A resumed shard is initialised from its checkpoint, at that checkpoint's step.
    const PsShardOptions::Start& start = *options_.resume;
    store_.restore(start.params, start.momentum, start.optimizer_steps);
    initialised_ = true;
    version_ = start.step;
    for (Worker& w : workers_) w.clock = w.read_clock = version_;
    options_.resume.reset();  // the copy is not needed any more
  }
}

void ShardState::on_message(const std::string& peer, std::span<const Buffer> frames,
                            Clock::time_point now, const std::string& address, const Sink& send) {
  send_ = &send;
  if (failure_) return;  // the run is over; serve() is about to throw
  if (frames.empty() || frames.size() > 2) {
    reject(peer, std::to_string(frames.size()) +
                     " frames, expected a header and at most one "
                     "payload");
    return;
  }
  wire::Header header;
  try {
    header = wire::decode_header(frames[0].bytes);
  } catch (const wire::WireError& e) {
    if (const auto version = foreign_hello_version(frames[0].bytes)) {
      refuse(peer, address,
             "HELLO in wire version " + std::to_string(*version) + ", this shard speaks version " +
                 std::to_string(wire::kWireVersion));
    } else {
      reject(peer, e.what());
    }
    return;
  }
  // The header announces the payload; the frames must agree, or the float count a handler
  // relies on would not be the one that arrived.
  const bool has_payload = frames.size() == 2;
  if (has_payload != (header.payload_bytes > 0) ||
      (has_payload && frames[1].size() != header.payload_bytes)) {
    reject(peer, header.to_string() + ": payload frame of " +
                     (has_payload ? std::to_string(frames[1].size()) + " B" : "none") +
                     " does not match the header");
    return;
  }
  dispatch(peer, header, has_payload ? frames[1] : Buffer{}, now, address);
}

std::vector<Outgoing> ShardState::on_message(const std::string& peer,
                                             std::span<const Buffer> frames, Clock::time_point now,
                                             const std::string& address) {
  std::vector<Outgoing> out;
  on_message(peer, frames, now, address, [&](Outgoing&& o) { out.push_back(std::move(o)); });
  return out;
}

std::vector<Outgoing> ShardState::on_tick(Clock::time_point now) {
  std::vector<Outgoing> out;
  on_tick(now, [&](Outgoing&& o) { out.push_back(std::move(o)); });
  return out;
}

void ShardState::dispatch(const std::string& peer, const wire::Header& header,
                          const Buffer& payload, Clock::time_point now,
                          const std::string& address) {
  const MessageType type = header.type;
  if (type == MessageType::kHello) return hello(peer, header, now, address);
  if (type == MessageType::kHelloAck || type == MessageType::kReply ||
      type == MessageType::kError) {
    reject(peer, header.to_string() + ": shards send this type, they never receive it");
    return;
  }
  // Parameters move only for this shard's whole range (PULL, INIT) or one of its chunks
  // (PUSHPULL): a worker splits by balanced_ranges() and chunk_ranges() too, so any other range
  // means a different shard layout or a corrupt sender.
  const bool whole_range = type == MessageType::kPull || type == MessageType::kInit;
  if (whole_range && (header.key_begin != range_.begin || header.key_end != range_.end)) {
    reject(peer, header.to_string() + ": keys are not this shard's range " +
                     wire::range_text(range_.begin, range_.end));
    return;
  }
  std::size_t chunk = 0;
  if (type == MessageType::kPushPull) {
    const auto found = chunk_of(header);
    if (!found) {
      reject(peer, header.to_string() + ": keys are not a chunk of this shard's range " +
                       wire::range_text(range_.begin, range_.end) + " (chunks of " +
                       std::to_string(wire::kChunkKeys) + " keys from its start)");
      return;
    }
    chunk = *found;
  }
  if (type == MessageType::kHeartbeat) {
    // Heartbeats come on the client's own heartbeat connection, never the one that said
    // HELLO, so they are matched by rank.
    if (header.sender < workers_.size()) {
      Worker& w = workers_[header.sender];
      if (w.presence == Presence::kConnected) w.last_seen = now;
      if (w.presence != Presence::kAbsent) return;  // a late one after BYE is harmless
    }
    reject(peer, header.to_string() + ": no worker of that rank has said HELLO");
    return;
  }
  const auto found = rank_of_peer_.find(peer);
  if (found == rank_of_peer_.end()) {
    reject(peer, header.to_string() + ": this connection has not said HELLO");
    return;
  }
  const int rank = found->second;
  Worker& w = workers_[rank];
  if (header.sender != static_cast<std::uint32_t>(rank)) {
    reject(peer,
           header.to_string() + ": this connection said HELLO as worker " + std::to_string(rank));
    return;
  }
  if (w.presence == Presence::kDropped) {
    // It was given up for dead and the run went on without it; tell it rather than ignore it.
    return emit(error_to(peer, "worker " + std::to_string(rank) +
                                   " was dropped from the run after a silence longer than the "
                                   "timeout"));
  }
  if (w.presence != Presence::kConnected) {
    reject(peer, header.to_string() + ": worker " + std::to_string(rank) + " already left");
    return;
  }
  w.last_seen = now;
  if (type == MessageType::kPushPull) w.last_push = now;
  switch (type) {
    case MessageType::kInit:
      return init(rank, payload);
    case MessageType::kPull:
    case MessageType::kPushPull:
      if (!initialised_ || !everyone_joined()) {
        // Rank 0's INIT may still be on its way, or a worker has not joined yet (the start
        // gate): answer once both happened. A worker has one request in flight, a few at most
        // (a push_pull is one message per chunk); more is a flood, not a worker.
        const auto mine = std::count_if(before_init_.begin(), before_init_.end(),
                                        [&](const Deferred& d) { return d.rank == rank; });
        const auto limit = kMaxDeferredPerWorker * static_cast<long>(store_.chunks().size());
        if (mine >= limit) {
          return reject(peer, header.to_string() + ": too many requests before INIT");
        }
        before_init_.push_back({rank, header, payload, chunk, now});
        return;
      }
      if (type == MessageType::kPull) return reply(rank, 0);
      return push_pull(rank, header, payload, chunk);
    case MessageType::kBye:
      return bye(rank);
    default:
      reject(peer, header.to_string() + ": unexpected type");
      return;
  }
}

void ShardState::hello(const std::string& peer, const wire::Header& header, Clock::time_point now,
                       const std::string& address) {
  const std::uint32_t rank = header.sender;
  const std::uint32_t n = workers_.size();
  const std::string who = "worker " + std::to_string(rank);
  std::string why;
  if (const auto it = rank_of_peer_.find(peer); it != rank_of_peer_.end()) {
    why = who + ": this connection already said HELLO as worker " + std::to_string(it->second);
  } else if (rank >= n) {
    why = who + ": rank out of range, this shard serves world size " + std::to_string(n) +
          " (ranks 0.." + std::to_string(n - 1) + ")";
  } else if (header.aux != n) {
    why = who + ": world size " + std::to_string(header.aux) + ", this shard serves world size " +
          std::to_string(n);
  } else if (header.key_begin != 0 || header.key_end != options_.model_size) {
    why = who + ": model has " + std::to_string(header.key_end - header.key_begin) +
          " parameters, this shard serves a model of " + std::to_string(options_.model_size);
  } else if (workers_[rank].presence == Presence::kConnected) {
    const std::string& from = workers_[rank].address;
    why = who + ": rank already connected" + (from.empty() ? "" : " (from " + from + ")");
  } else if (workers_[rank].presence != Presence::kAbsent) {
    why = who + ": rank already left the run";
  }
  if (!why.empty()) return refuse(peer, address, why);
  Worker& w = workers_[rank];
  w.presence = Presence::kConnected;
  w.peer = peer;
  w.address = address;
  w.last_seen = now;
  w.last_push = now;  // a worker's first push follows its HELLO by a step's compute
  rank_of_peer_[peer] = static_cast<int>(rank);
  // The ack carries the range this shard serves, so a worker with another shard layout fails
  // at the handshake instead of pushing the wrong keys.
  emit({peer,
        wire::make_header(MessageType::kHelloAck, options_.shard, version_, range_.begin,
                          range_.end, 0),
        {}});
  if (everyone_joined()) open_start_gate();  // this was the last worker to join
}

void ShardState::bye(int rank) {
  Worker& w = workers_[rank];
  w.presence = Presence::kLeft;
  w.held_staleness.reset();
  if (options_.mode == Mode::kSync && pushes_this_step_ > 0) {
    // Others already pushed this step and wait for an average that now cannot be formed.
    return fail({rank, w.address, name() + " step " + std::to_string(version_),
                 "worker " + std::to_string(rank) + " left (BYE) while step " +
                     std::to_string(version_) + " waits for its gradient: ending the run",
                 false});
  }
  release_held();  // the slowest may just have left
}

void ShardState::on_stop(const std::string& reason, const Sink& send) {
  for (const Worker& w : workers_) {
    if (w.presence == Presence::kConnected) send(error_to(w.peer, reason));
  }
}

bool ShardState::finished() const {
  return !failure_ && std::none_of(workers_.begin(), workers_.end(), [](const Worker& w) {
    return w.presence == Presence::kAbsent || w.presence == Presence::kConnected;
  });
}

void ShardState::fail(ShardFailure failure) {
  log(name() + ": " + failure.problem);
  // Every connected worker hears why, so none of them waits out its own timeout.
  on_stop(failure.problem, *send_);
  failure_ = std::move(failure);
}

void ShardState::refuse(const std::string& peer, const std::string& address,
                        const std::string& why) {
  // A refused HELLO is answered (the worker must learn why) and logged (so must the operator).
  log(name() + ": refused HELLO from " + peer_hex(peer) +
      (address.empty() ? "" : " (" + address + ")") + ": " + why);
  emit(error_to(peer, why));
}

Outgoing ShardState::error_to(const std::string& peer, const std::string& text) const {
  return make_error(peer, options_.shard, range_.begin, range_.end, text);
}

std::optional<std::size_t> ShardState::chunk_of(const wire::Header& header) const {
  // Chunk c covers [range.begin + c * kChunkKeys, min(range.end, that + kChunkKeys)): the key
  // range must start on a chunk boundary and end exactly where that chunk ends.
  if (header.key_begin < range_.begin || header.key_begin > range_.end) return std::nullopt;
  const std::uint64_t offset = header.key_begin - range_.begin;
  if (offset % wire::kChunkKeys != 0) return std::nullopt;
  const std::uint64_t c = offset / wire::kChunkKeys;
  const auto& chunks = store_.chunks();
  if (c >= chunks.size() || header.key_end != range_.begin + chunks[c].end) return std::nullopt;
  return static_cast<std::size_t>(c);
}

std::uint64_t ShardState::slowest_clock_if(int rank, std::uint64_t clock) const {
  std::uint64_t slowest = clock;
  for (std::size_t r = 0; r < workers_.size(); ++r) {
    const Worker& w = workers_[r];
    if (static_cast<int>(r) == rank || w.presence == Presence::kLeft ||
        w.presence == Presence::kDropped) {
      continue;
    }
    slowest = std::min(slowest, w.clock);
  }
  return slowest;
}

std::uint64_t ShardState::slowest_clock(std::uint64_t fallback) const {
  // Workers not yet connected count at clock 0: SSP holds everyone until they join.
  std::optional<std::uint64_t> slowest;
  for (const Worker& w : workers_) {
    if (w.presence == Presence::kLeft || w.presence == Presence::kDropped) continue;
    slowest = std::min(slowest.value_or(w.clock), w.clock);
  }
  return slowest.value_or(fallback);
}

void ShardState::reject(const std::string& peer, const std::string& reason) {
  ++rejected_;
  if (rejected_ > kLoggedRejections && rejected_ % kRejectionLogEvery != 0) return;
  log(name() + ": rejected message from " + peer_hex(peer) + ": " + reason +
      (rejected_ == kLoggedRejections ? " (from now on only every 1000th rejection is logged)"
                                      : ""));
}

void ShardState::log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

}  // namespace gradsync
