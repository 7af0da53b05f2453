#include "server/shard_state.h"

#include "common/error.h"
#include "common/failure_note.h"
#include "server/consistency/async_policy.h"
#include "server/consistency/ssp_policy.h"
#include "server/consistency/sync_policy.h"
#include "server/push_decoder.h"

namespace gradsync {
namespace {

using wire::MessageType;
using Mode = PsShardOptions::Mode;

constexpr std::uint64_t kLoggedRejections = 100;    // then every 1000th, so a flood cannot
constexpr std::uint64_t kRejectionLogEvery = 1000;  // bury the log or slow the shard down

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

std::unique_ptr<ConsistencyPolicy> make_policy(const PsShardOptions& options,
                                               ConsistencyState& state,
                                               const ShardSessions& sessions,
                                               const ShardOutput& out) {
  switch (options.mode) {
    case Mode::kSync:
      return std::make_unique<SyncPolicy>(options, state, sessions, out);
    case Mode::kSsp:
      return std::make_unique<SspPolicy>(options, state, sessions, out);
    case Mode::kAsync:
      break;
  }
  return std::make_unique<AsyncPolicy>(options, state, sessions, out);
}

}  // namespace

ShardState::ShardState(const PsShardOptions& options, Clock::time_point now)
    : options_((validate(options), options)),
      range_(balanced_ranges(options.model_size, options.shards)[options.shard]),
      out_(options_, range_),
      sessions_(options_, now, out_),
      params_(options_, range_, sessions_, out_),  // a resumed shard is initialised here
      policy_(make_policy(options_, params_, sessions_, out_)),
      trace_(options.trace, options.shard) {
  options_.resume.reset();  // the checkpoint's copy is in params_ now
}

void ShardState::on_message(const std::string& peer, std::span<const Buffer> frames,
                            Clock::time_point now, const std::string& address, const Sink& send) {
  out_.use(send);
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

// Liveness, every tick: the session rules first (who never said HELLO, who went silent), then,
// unless messages are still in transit, the progress checks: who is alive but holds the others
// up, waited for by the start gate (rank 0's INIT) or by the mode's rules (the policy's).
// Heartbeats come from their own thread, so a worker whose training thread is stuck still looks
// alive. Without the progress checks the others would each time out on their own ("no reply
// from shard 0") with no one to blame; the shard knows whom it waits for, and says so to all of
// them. Each check needs both: someone has waited for the timeout (as long as that worker's own
// client waits), and the awaited worker pushed nothing for as long (it is not merely slow this
// step).
void ShardState::on_tick(Clock::time_point now, const Sink& send, bool in_transit) {
  out_.use(send);
  if (failure_) return;
  auto failure = sessions_.check_silence(
      now, [&](int rank) { return policy_->step_of(rank); },
      [&](int rank) { policy_->worker_dropped(rank); });
  if (failure) return fail(std::move(*failure));
  if (in_transit) return;
  check_init(now);
  if (failure_) return;
  if ((failure = policy_->check_progress(now))) fail(std::move(*failure));
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
    const std::string why = sessions_.heartbeat(header, now);
    if (!why.empty()) reject(peer, header.to_string() + ": " + why);
    return;
  }
  const ShardSessions::Admission who = sessions_.admit(peer, header, now);
  if (!who.answer.empty()) return out_.send(out_.error_to(peer, who.answer));
  if (who.rank < 0) return reject(peer, who.rejection);
  const int rank = who.rank;
  switch (type) {
    case MessageType::kInit:
      return init(rank, payload);
    case MessageType::kPull:
      // Rank 0's INIT may still be on its way, or a worker has not joined yet (the start
      // gate): answer once both happened.
      if (!params_.initialised() || !sessions_.everyone_joined()) {
        return hold(peer, {rank, header, payload, chunk, now});
      }
      return params_.reply(rank, 0);
    case MessageType::kPushPull: {
      trace_.received(rank, header.step, chunk == 0, chunk + 1 == store().chunks().size(),
                      payload.size(), now);
      // From here on a push is the chunk's dense fp32 gradient, whatever its encoding, so the
      // consistency rules never see one; decoded at once, so a bad one is refused at once.
      const std::optional<Buffer> grad = decode(rank, header, payload, chunk);
      if (!grad) return;
      if (!params_.initialised() || !sessions_.everyone_joined()) {
        return hold(peer, {rank, header, *grad, chunk, now});  // as for PULL
      }
      return push(rank, header, *grad, chunk);
    }
    case MessageType::kBye:
      return bye(rank);
    default:
      reject(peer, header.to_string() + ": unexpected type");
      return;
  }
}

void ShardState::hello(const std::string& peer, const wire::Header& header, Clock::time_point now,
                       const std::string& address) {
  const std::string why = sessions_.join(peer, header, now, address);
  if (!why.empty()) return refuse(peer, address, why);
  // The ack carries the range this shard serves, so a worker with another shard layout fails
  // at the handshake instead of pushing the wrong keys.
  out_.send({peer,
             wire::make_header(MessageType::kHelloAck, options_.shard, params_.version(),
                               range_.begin, range_.end, 0),
             {}});
  if (sessions_.everyone_joined()) open_start_gate();  // this was the last worker to join
}

std::optional<Buffer> ShardState::decode(int rank, const wire::Header& header,
                                         const Buffer& payload, std::size_t chunk) {
  try {
    return decode_push(header, payload);
  } catch (const Error& e) {
    // A payload that cannot be a gradient of its chunk (a top-k index outside it): refused like
    // any push the protocol forbids, to the worker and in the log, and nothing is applied.
    out_.answer_error(sessions_.peer(rank),
                      "worker " + std::to_string(rank) + " pushed chunk " + std::to_string(chunk) +
                          " of step " + std::to_string(header.step) + " as " +
                          wire::encoding_name(header.encoding()) + ": " + e.what());
    return std::nullopt;
  }
}

void ShardState::push(int rank, const wire::Header& header, const Buffer& payload,
                      std::size_t chunk) {
  const std::uint64_t applies = store().applies();
  const Clock::time_point begin = trace_.on() ? Clock::now() : Clock::time_point{};
  if (auto failure = policy_->push(rank, header, payload, chunk)) fail(std::move(*failure));
  if (store().applies() != applies) trace_.applied(rank, header.step, begin, Clock::now());
}

void ShardState::bye(int rank) {
  sessions_.leave(rank);
  if (auto failure = policy_->worker_left(rank)) fail(std::move(*failure));
}

void ShardState::on_stop(const std::string& reason, const Sink& send) {
  for (int r = 0; r < sessions_.size(); ++r) {
    if (sessions_.connected(r)) send(out_.error_to(sessions_.peer(r), reason));
  }
}

bool ShardState::finished() const { return !failure_ && sessions_.finished(); }

void ShardState::fail(ShardFailure failure) {
  // Before the workers hear it: the launcher orders failures by these notes (the workers'
  // own notes, of what they hear next, are consequences of this one).
  note_failure(out_.name() + ": " + failure.problem);
  out_.log(out_.name() + ": " + failure.problem);
  // Every connected worker hears why, so none of them waits out its own timeout.
  on_stop(failure.problem, out_.sink());
  failure_ = std::move(failure);
}

void ShardState::refuse(const std::string& peer, const std::string& address,
                        const std::string& why) {
  // A refused HELLO is answered (the worker must learn why) and logged (so must the operator).
  out_.log(out_.name() + ": refused HELLO from " + peer_hex(peer) +
           (address.empty() ? "" : " (" + address + ")") + ": " + why);
  out_.send(out_.error_to(peer, why));
}

std::optional<std::size_t> ShardState::chunk_of(const wire::Header& header) const {
  // Chunk c covers [range.begin + c * kChunkKeys, min(range.end, that + kChunkKeys)): the key
  // range must start on a chunk boundary and end exactly where that chunk ends.
  if (header.key_begin < range_.begin || header.key_begin > range_.end) return std::nullopt;
  const std::uint64_t offset = header.key_begin - range_.begin;
  if (offset % wire::kChunkKeys != 0) return std::nullopt;
  const std::uint64_t c = offset / wire::kChunkKeys;
  const auto& chunks = params_.store().chunks();
  if (c >= chunks.size() || header.key_end != range_.begin + chunks[c].end) return std::nullopt;
  return static_cast<std::size_t>(c);
}

void ShardState::reject(const std::string& peer, const std::string& reason) {
  ++rejected_;
  if (rejected_ > kLoggedRejections && rejected_ % kRejectionLogEvery != 0) return;
  out_.log(out_.name() + ": rejected message from " + peer_hex(peer) + ": " + reason +
           (rejected_ == kLoggedRejections ? " (from now on only every 1000th rejection is logged)"
                                           : ""));
}

}  // namespace gradsync
