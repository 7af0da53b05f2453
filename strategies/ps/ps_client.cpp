#include "strategies/ps/ps_client.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <thread>
#include <zmq.hpp>

#include "common/error.h"
#include "common/link_shaper.h"
#include "server/local_endpoint.h"
#include "strategies/ps/reply_copy.h"
#include "strategies/ps/shard_link.h"

namespace gradsync {
namespace {

using Clock = std::chrono::steady_clock;
using wire::MessageType;

constexpr auto kByeLinger = std::chrono::milliseconds(1000);  // the destructor's last BYEs
constexpr std::int64_t kMaxErrorFrame = 4096;
// A shard times the same waits and names whom it waits for (a worker that is alive but does not
// push: shard_state.h, liveness). Replies get this much longer here, so that its verdict arrives
// before this client's own timeout, which could only name the shard.
constexpr auto kShardVerdictSlack = std::chrono::seconds(1);

}  // namespace

class PsClient::Impl {
 public:
  enum class Kind { kInit, kPull, kPushPull };

  // Not copyable nor movable: the handlers below (transmit_, file_) capture `this`.
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  explicit Impl(const PsClientOptions& options) : options_(options) {
    const int shards = static_cast<int>(options_.endpoints.size());
    if (shards < 1) throw Error("PsClient: no shard endpoints");
    if (options_.world_size < 1 || options_.rank < 0 || options_.rank >= options_.world_size) {
      throw Error("PsClient: rank " + std::to_string(options_.rank) + " is not in world size " +
                  std::to_string(options_.world_size));
    }
    expected_ = balanced_ranges(options_.model_size, shards);
    // Replies come in chunks (wire_format.h), so one chunk bounds what this client accepts.
    const auto max_frame = std::max<std::int64_t>(kMaxErrorFrame, wire::kChunkKeys * sizeof(float));
    try {
      for (int k = 0; k < shards; ++k) {
        links_.emplace_back(context_, k, options_.endpoints[k], expected_[k], options_.curve,
                            max_frame, options_.same_host_ipc);
      }
      say_hello(links_, options_.rank, options_.world_size, options_.model_size, options_.run_id,
                options_.timeout);
    } catch (const std::exception& e) {
      shut_down(e.what(), std::chrono::milliseconds(0));
      throw;
    }
    if (options_.heartbeat.count() > 0) {
      std::vector<std::string> endpoints = options_.endpoints;
      if (options_.same_host_ipc) {
        for (std::string& endpoint : endpoints) endpoint = same_host_endpoint(endpoint);
      }
      heartbeat_ =
          std::make_unique<HeartbeatSender>(context_, std::move(endpoints), options_.rank,
                                            options_.run_id, options_.heartbeat, options_.curve);
    }
  }

  ~Impl() {
    if (!broken_.empty()) return;  // shut_down() already closed everything
    heartbeat_.reset();
    // BYE lets the shard tell a clean exit from a crash; a short linger lets it leave without
    // holding the process long if the shard is gone. Messages still queued on the emulated
    // link belong to requests nobody waits for any more: they go nowhere.
    shaper_.clear();
    const auto bye = wire::make_header(MessageType::kBye, options_.rank, 0, 0, 0, 0);
    for (ShardLink& link : links_) {
      try {
        link.send(bye, {}, "BYE");
      } catch (const std::exception&) {
        // Leaving without BYE is what a crash does too; the shard copes with both.
      }
    }
    shut_down("closed", kByeLinger);
  }

  const std::vector<KeyRange>& ranges() const { return expected_; }

  Ticket send(Kind kind, std::uint64_t step, std::span<const float> out, std::span<float> in) {
    check_usable();
    const std::uint64_t size = options_.model_size;
    const std::size_t given = kind == Kind::kPull ? in.size() : out.size();
    if (given != size || (kind == Kind::kPushPull && in.size() != size)) {
      throw Error("PsClient: buffers of " + std::to_string(given) + " floats for a model of " +
                  std::to_string(size));
    }
    if (kind == Kind::kInit && options_.rank != 0) {
      throw Error("PsClient::init: only rank 0 sends the initial parameters, this is rank " +
                  std::to_string(options_.rank));
    }
    Request request{next_ticket_++, kind, step, in, {}, static_cast<int>(links_.size()), {}};
    request.stats.issued = Clock::now();
    request.stats.answered.assign(links_.size(), Clock::time_point{});
    const MessageType type = type_of(kind);
    // INIT and PULL name each shard's whole range; a push_pull sends one PUSHPULL per chunk of
    // it (wire_format.h), so a shard can answer chunk c while chunk c + 1 is on its way; the
    // chunks go out in send_order() (ps_client.h).
    std::vector<std::vector<KeyRange>> pieces;
    for (ShardLink& link : links_) {
      const KeyRange r = link.range();
      request.cursor.push_back(r.begin);
      pieces.push_back(kind == Kind::kPushPull ? chunk_ranges(r) : std::vector<KeyRange>{r});
    }
    try {
      for (const ShardPiece& piece : send_order(pieces, options_.rank)) {
        ShardLink& link = links_[piece.shard];
        // INIT: the slice of the caller's buffer, sent in place (zmq_transport.h). PUSHPULL:
        // the same, or under comm.compression the chunk encoded (push_encoder.h), its
        // encoding in aux; its bytes are what is counted and paced below.
        Buffer payload;
        std::uint32_t aux = 0;
        if (kind == Kind::kPushPull) {
          PushEncoder::Encoded encoded = encoder_.encode(step, piece.keys, out);
          payload = std::move(encoded.payload);
          aux = static_cast<std::uint32_t>(encoded.encoding);
        } else if (kind == Kind::kInit) {
          payload.bytes = std::as_bytes(out.subspan(piece.keys.begin, piece.keys.size()));
        }
        const auto header = wire::make_header(type, options_.rank, step, piece.keys.begin,
                                              piece.keys.end, payload.size(), aux);
        request.stats.bytes_sent += wire::kHeaderBytes + payload.size();
        const std::size_t bytes = payload.size();
        shaper_.send(bytes, Queued{link.shard(), header, std::move(payload)}, transmit_);
      }
      // What the link lets go at once (a PULL on an idle link) leaves now, not at wait().
      shaper_.release_sent(Clock::now(), transmit_);
    } catch (const std::exception& e) {
      shut_down(e.what(), std::chrono::milliseconds(0));
      throw;
    }
    pending_.push_back(std::move(request));
    return pending_.back().ticket;
  }

  PushPullStats wait(Ticket ticket) {
    check_usable();
    if (done_.count(ticket) == 0 &&
        (pending_.empty() || ticket < pending_.front().ticket || ticket > pending_.back().ticket)) {
      throw Error("PsClient::wait: ticket " + std::to_string(ticket) +
                  " was never issued or was already waited for");
    }
    auto deadline = Clock::now() + reply_timeout();
    try {
      while (true) {
        complete_in_order();
        if (done_.count(ticket) != 0) break;
        receive_some(deadline);
      }
    } catch (const std::exception& e) {
      shut_down(e.what(), std::chrono::milliseconds(0));
      throw;
    }
    const PushPullStats stats = done_[ticket];
    done_.erase(ticket);
    return stats;
  }

 private:
  // A message waiting for the emulated link: to send (to `shard`), or received (from it).
  struct Queued {
    int shard;
    wire::Header header;
    Buffer payload;
  };
  struct Arrived {
    int shard;
    ShardLink::Message message;
  };

  static MessageType type_of(Kind kind) {
    if (kind == Kind::kInit) return MessageType::kInit;
    if (kind == Kind::kPull) return MessageType::kPull;
    return MessageType::kPushPull;
  }

  // What a request is, in errors (the shard is named before it: see ShardLink::name).
  static std::string operation_of(MessageType type, std::uint64_t step) {
    if (type == MessageType::kInit) return "init";
    if (type == MessageType::kPull) return "pull";
    return "push_pull step " + std::to_string(step);
  }

  void transmit(Queued&& q) {
    ShardLink& link = links_[q.shard];
    link.send(q.header, q.payload, operation_of(q.header.type, q.header.step));
  }

  struct Request {
    Ticket ticket;
    Kind kind;
    std::uint64_t step;
    std::span<float> dest;
    std::vector<std::uint64_t> cursor;  // per shard: the next key its reply must start at
    int remaining;                      // shards that have not answered in full
    PushPullStats stats;
  };

  static std::string operation(const Request& r) { return operation_of(type_of(r.kind), r.step); }

  // Requests complete in order: the oldest first, even if a later one was answered sooner.
  void complete_in_order() {
    while (!pending_.empty() && pending_.front().remaining == 0) {
      done_[pending_.front().ticket] = pending_.front().stats;
      pending_.pop_front();
      answered_ = true;
    }
  }

  // Waits (until `deadline`) for reply messages from the shards that still owe one, and with an
  // emulated link also until the next queued message is due, then releases what is due: the
  // replies received (filed into place) and the chunks to send, side by side (full duplex).
  void receive_some(Clock::time_point& deadline) {
    const std::vector<int> owing = shards_owing_a_reply();
    for (int k : poll_for_replies(owing, deadline)) read_replies(k);
    release_due(deadline);
  }

  std::vector<int> shards_owing_a_reply() {
    std::vector<int> owing;
    for (const ShardLink& link : links_) {
      if (next_request_for(link.shard()) != nullptr) owing.push_back(link.shard());
    }
    return owing;
  }

  // The shards of `owing` with messages to read, once one has some, `deadline` has passed or
  // the link has a queued message due. Throws TimeoutError naming the first shard owing a
  // reply when the deadline passed with nothing to read and nothing queued.
  std::vector<int> poll_for_replies(const std::vector<int>& owing, Clock::time_point deadline) {
    std::vector<zmq::pollitem_t> items;
    for (int k : owing) items.push_back({links_[k].socket().handle(), 0, ZMQ_POLLIN, 0});
    const auto now = Clock::now();
    auto wake = std::min(deadline, shaper_.next_release());
    // Past the deadline with messages still queued: those come first, no spinning until then.
    if (wake <= now && !shaper_.idle()) wake = shaper_.next_release();
    const auto timeout = poll_timeout(now, wake, std::chrono::milliseconds(options_.timeout));
    int ready = 0;
    if (!items.empty()) {
      ready = zmq::poll(items, timeout);
    } else if (wake > now) {
      // Every reply owed is already here, waiting for the link: nothing to poll.
      std::this_thread::sleep_for(timeout);
    }
    if (ready == 0 && shaper_.idle() && Clock::now() >= deadline) {
      const ShardLink& link = links_[owing.empty() ? 0 : owing[0]];
      const Request* request = owing.empty() ? nullptr : next_request_for(link.shard());
      throw TimeoutError(link.name(), link.shard(), link.endpoint(),
                         request ? operation(*request) : "push_pull",
                         "no reply within " + seconds_text(reply_timeout()));
    }
    std::vector<int> readable;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (items[i].revents & ZMQ_POLLIN) readable.push_back(owing[i]);
    }
    return readable;
  }

  // Everything shard k has sent, not one message per poll: a reply is many chunks. Each is filed
  // at once, or with an emulated link stamped with its arrival now, to be filed when due (its
  // request then stays pending, so what follows it is read as well).
  void read_replies(int k) {
    ShardLink& link = links_[k];
    while (next_request_for(k) != nullptr || shaper_.shaping()) {
      auto message = link.try_read(pending_operation(k));
      if (!message) break;
      const std::size_t bytes = message->payload.size();
      shaper_.received(bytes, Arrived{k, std::move(*message)}, file_);
    }
  }

  // With an emulated link: files the replies due and sends the chunks due. A chunk leaving the
  // send queue moves the deadline to `timeout` after it: the shard cannot answer what it has
  // not been sent.
  void release_due(Clock::time_point& deadline) {
    if (!shaper_.shaping()) return;
    const auto at = Clock::now();
    shaper_.release_received(at, file_);
    shaper_.release_sent(at, [&](Queued&& q) {
      transmit(std::move(q));
      deadline = std::max(deadline, at + reply_timeout());
    });
  }

  // Until this client's first request is answered, the shards may hold it at their start gate
  // until the last worker says HELLO, which they allow for `timeout` from their start: that much
  // more on top (the answer may then still queue behind the others' on a shard's link).
  std::chrono::milliseconds reply_timeout() const {
    return options_.timeout + kShardVerdictSlack +
           (answered_ ? std::chrono::milliseconds(0) : options_.timeout);
  }

  std::string pending_operation(int shard) {
    const Request* request = next_request_for(shard);
    return request ? operation(*request) : "reading a reply";
  }

  // The oldest request `shard` has not finished answering: its next message belongs to it.
  Request* next_request_for(int shard) {
    for (Request& r : pending_) {
      if (r.cursor[shard] != kAnswered) return &r;
    }
    return nullptr;
  }

  // Files one REPLY message from shard k. A shard answers INIT with one empty REPLY, and PULL
  // or PUSHPULL with REPLYs whose ranges tile its range in order (its chunks): each is copied
  // into place as it arrives, while the next one is still on the wire. The request is complete
  // once every shard's replies reached the end of its range.
  void file_reply(int k, const ShardLink::Message& message) {
    const ShardLink& link = links_[k];
    Request* pending = next_request_for(k);
    const wire::Header& h = message.header;
    if (pending == nullptr) {
      throw PeerError(link.name(), k, link.endpoint(), "reading a reply",
                      "a reply nobody asked for: " + h.to_string());
    }
    Request& request = *pending;
    const KeyRange r = link.range();
    const std::uint64_t at = request.cursor[k];
    const bool init = request.kind == Kind::kInit;
    // Every chunk must continue where the last one ended and make progress (only an empty
    // range is answered by an empty chunk); an INIT's ack is empty at the range's start.
    const bool fits =
        h.type == MessageType::kReply && h.key_begin == at &&
        (init ? h.key_end == at : h.key_end <= r.end && (h.key_end > at || r.size() == 0));
    if (!fits) {
      throw PeerError(link.name(), k, link.endpoint(), operation(request),
                      "expected a REPLY for keys from " + std::to_string(at) + " within " +
                          wire::range_text(r.begin, r.end) + ", got " + h.to_string());
    }
    copy_(request.dest.data() + h.key_begin, message.payload.data(), message.payload.size());
    request.stats.bytes_received += wire::kHeaderBytes + message.payload.size();
    request.stats.max_staleness = std::max(request.stats.max_staleness, h.aux);
    request.cursor[k] = h.key_end;
    if (init || h.key_end == r.end) {
      request.cursor[k] = kAnswered;
      request.stats.answered[static_cast<std::size_t>(k)] = Clock::now();
      --request.remaining;
    }
  }

  // Closes every socket, then the context: closing the context blocks until ZeroMQ released
  // every message, including zero-copy ones pointing into the caller's spans.
  void shut_down(const std::string& why, std::chrono::milliseconds linger) {
    broken_ = why.empty() ? "failed" : why;
    shaper_.clear();  // nothing queued leaves any more; its spans are the caller's again
    heartbeat_.reset();
    for (ShardLink& link : links_) link.close(linger);
    context_.close();
  }

  void check_usable() const {
    if (!broken_.empty()) throw Error("PsClient: unusable after an earlier failure: " + broken_);
    // Without heartbeats the shards would soon end the run naming this worker as dead.
    if (heartbeat_) {
      if (const std::string why = heartbeat_->failure(); !why.empty()) {
        throw Error("PsClient rank " + std::to_string(options_.rank) + ": " + why);
      }
    }
  }

  static constexpr std::uint64_t kAnswered = ~std::uint64_t{0};

  PsClientOptions options_;
  zmq::context_t context_{1};
  std::deque<ShardLink> links_;
  std::vector<KeyRange> expected_;  // shard k's key range; each shard's HELLO_ACK confirmed it
  std::deque<Request> pending_;
  std::map<Ticket, PushPullStats> done_;
  Ticket next_ticket_ = 1;
  std::string broken_;
  std::unique_ptr<HeartbeatSender> heartbeat_;
  bool answered_ = false;  // a request completed: the shards' start gate is behind us
  PushEncoder encoder_{options_.compression};  // comm.compression on pushes
  LinkShaper<Queued, Arrived> shaper_{options_.link};
  // What the shaper hands messages to, now or once the link has carried them.
  const std::function<void(Queued&&)> transmit_ = [this](Queued&& q) { transmit(std::move(q)); };
  const std::function<void(Arrived&&)> file_ = [this](Arrived&& a) {
    file_reply(a.shard, a.message);
  };
  const ReplyCopy copy_{options_.model_size * sizeof(float)};  // cached or streaming stores
};

PsClient::PsClient(const PsClientOptions& options) : impl_(std::make_unique<Impl>(options)) {}
PsClient::~PsClient() = default;

const std::vector<KeyRange>& PsClient::ranges() const { return impl_->ranges(); }

PsClient::Ticket PsClient::init(std::span<const float> params) {
  return impl_->send(Impl::Kind::kInit, 0, params, {});
}

PsClient::Ticket PsClient::push_pull(std::uint64_t step, std::span<const float> grads,
                                     std::span<float> params) {
  return impl_->send(Impl::Kind::kPushPull, step, grads, params);
}

PsClient::Ticket PsClient::pull(std::span<float> params) {
  return impl_->send(Impl::Kind::kPull, 0, {}, params);
}

PushPullStats PsClient::wait(Ticket ticket) { return impl_->wait(ticket); }

}  // namespace gradsync
