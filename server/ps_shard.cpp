#include "server/ps_shard.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <zmq.hpp>

#include "common/error.h"
#include "common/link_shaper.h"
#include "server/local_endpoint.h"
#include "server/shard_state.h"
#include "server/shard_trace.h"
#include "server/zap_handler.h"
#include "server/zmq_transport.h"

namespace gradsync {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kTick = std::chrono::milliseconds(100);     // liveness checks and stop() latency
constexpr auto kLinger = std::chrono::milliseconds(1000);  // for the last ERRORs at the end
constexpr int kMaxMessagesPerWake = 256;                   // then check liveness even under a flood
constexpr auto kRepeatLogEvery = std::chrono::seconds(10);
constexpr std::int64_t kMaxErrorFrame = 4096;  // an ERROR's text; every other frame is smaller

std::string describe_handshake_failure(std::uint16_t event, std::uint32_t value) {
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
    if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
      return "security mechanism mismatch (a client without the CURVE key, or CURVE against a "
             "plain shard)";
    }
    if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) {
      return "CURVE decryption failed (a client with another key pair)";
    }
    char hex[16];
    std::snprintf(hex, sizeof(hex), "0x%X", static_cast<unsigned>(value));
    return std::string("ZMTP protocol error ") + hex + " (not a gradsync client?)";
  }
  // ZeroMQ gives no reason here, typically a peer that hung up mid-handshake after a refusal.
  return "the peer went away mid-handshake (errno " + std::to_string(value) + ": " +
         zmq_strerror(value) + ")";
}

}  // namespace

class PsShard::Impl {
 public:
  explicit Impl(const PsShardOptions& options) : options_(options) {
    validate(options_);
    name_ = "shard " + std::to_string(options_.shard);
    // One sink for the serving thread and the ZAP thread, so their lines never interleave.
    auto sink = options_.log;
    options_.log = [this, sink](const std::string& line) {
      std::lock_guard<std::mutex> lock(log_mutex_);
      if (sink) {
        sink(line);
      } else {
        std::fprintf(stderr, "%s\n", line.c_str());
      }
    };
    const auto range = balanced_ranges(options_.model_size, options_.shards)[options_.shard];
    range_ = range;
    // The ZAP handler must listen before the socket binds: libzmq consults it from the first
    // connection on.
    if (options_.curve) {
      zap_ = std::make_unique<ZapHandler>(
          context_, options_.curve->public_key,
          [this](const std::string& line) { log(name_ + ": " + line); });
    }
    router_ = zmq::socket_t(context_, zmq::socket_type::router);
    // No frame may be larger than this shard's parameters (INIT, an fp32 PUSHPULL), a top-k
    // PUSHPULL of one chunk (at most 8 bytes a key: wire_format.h) or an ERROR text, so a peer
    // cannot make the shard buffer an arbitrary amount of memory.
    const auto top_k_frame = 8 * std::min<std::uint64_t>(range.size(), wire::kChunkKeys);
    set_common_options(
        router_, kLinger,
        std::max<std::int64_t>({kMaxErrorFrame, static_cast<std::int64_t>(range.size() * 4),
                                static_cast<std::int64_t>(top_k_frame)}));
    // Replying to a worker that has gone must fail loudly (EHOSTUNREACH), not vanish.
    router_.set(zmq::sockopt::router_mandatory, 1);
    set_queue_room(router_, range);  // per worker, a few requests' chunks may wait each way
    if (options_.curve) make_curve_server(router_, *options_.curve);
    // Handshake failures (a client without the key, a stranger speaking another protocol)
    // never reach the handler as messages; the monitor is how the shard gets to log them.
    const std::string monitor_address =
        "inproc://gradsync-shard-monitor-" + std::to_string(options_.shard);
    if (zmq_socket_monitor(
            router_.handle(), monitor_address.c_str(),
            // Not _AUTH: the ZAP handler logs those itself, with the key.
            ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0) {
      throw Error(name_ + ": cannot monitor its socket: " + zmq_strerror(zmq_errno()));
    }
    monitor_ = zmq::socket_t(context_, zmq::socket_type::pair);
    monitor_.set(zmq::sockopt::linger, 0);
    monitor_.connect(monitor_address);
    // An IPv6 literal ("::1") goes in brackets, and the socket must be told to speak IPv6.
    const bool ipv6 = options_.bind_host.find(':') != std::string::npos;
    if (ipv6) router_.set(zmq::sockopt::ipv6, 1);
    const std::string host = ipv6 ? "[" + options_.bind_host + "]" : options_.bind_host;
    const std::string address =
        "tcp://" + host + ":" + (options_.port == 0 ? "*" : std::to_string(options_.port));
    if (options_.listen_fd >= 0 && zmq_setsockopt(router_.handle(), ZMQ_USE_FD, &options_.listen_fd,
                                                  sizeof options_.listen_fd) != 0) {
      throw Error(name_ + ": cannot serve on the socket handed down: " + zmq_strerror(zmq_errno()));
    }
    try {
      router_.bind(address);
    } catch (const zmq::error_t& e) {
      throw Error(name_ + ": cannot listen on " + address + ": " + e.what());
    }
    endpoint_ = router_.get(zmq::sockopt::last_endpoint);
    if (options_.bind_ipc) {
      // The handed-down descriptor was the tcp bind's; the ipc bind makes its own socket.
      const int none = -1;
      zmq_setsockopt(router_.handle(), ZMQ_USE_FD, &none, sizeof none);
      const std::string ipc =
          shard_ipc_endpoint(std::atoi(endpoint_.substr(endpoint_.rfind(':') + 1).c_str()));
      try {
        router_.bind(ipc);
      } catch (const zmq::error_t& e) {
        throw Error(name_ + ": cannot listen on " + ipc + ": " + e.what() +
                    " (another shard of this run on this host?)");
      }
    }
  }

  ~Impl() {
    // Stop the monitor before the socket it watches closes, and both before the context.
    zmq_socket_monitor(router_.handle(), nullptr, 0);
    monitor_.close();
    router_.close();
    zap_.reset();
  }

  const std::string& endpoint() const { return endpoint_; }
  void stop() { stop_ = true; }
  PsShardTraffic traffic() const { return {bytes_sent_, bytes_received_}; }

  void serve() {
    if (served_.exchange(true)) throw Error(name_ + ": serve() may be called only once");
    ShardState state(options_, Clock::now());
    zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                               {monitor_.handle(), 0, ZMQ_POLLIN, 0}};
    try {
      while (true) {
        if (stop_) {
          state.on_stop(name_ + " stopped", send_);
          return;
        }
        // With an emulated link the loop also wakes when the next queued message is due, in
        // either direction: receiving and sending proceed side by side, neither waits for the
        // other (a full-duplex NIC).
        zmq::poll(items, 2, poll_timeout(Clock::now(), shaper_.next_release(), kTick));
        for (int i = 0; i < kMaxMessagesPerWake && (items[0].revents & ZMQ_POLLIN); ++i) {
          std::vector<zmq::message_t> frames = receive_message(router_);
          if (frames.empty()) break;
          if (shaper_.shaping() && is_heartbeat(frames)) {
            // Liveness never waits behind data: a heartbeat queued behind 100 MB at 1 Gbit/s
            // would arrive 0.8 s late.
            handle(state, frames);
            continue;
          }
          const std::size_t bytes = payload_bytes(frames);  // before frames moves away
          shaper_.received(bytes, std::move(frames), [&](Frames&& f) { handle(state, f); });
        }
        if (items[1].revents & ZMQ_POLLIN) read_monitor();
        if (shaper_.shaping()) {
          // Received first: the replies they cause join the send queue behind those due now.
          const auto now = Clock::now();
          shaper_.release_received(now, [&](Frames&& frames) {
            if (!state.failure()) handle(state, frames);
          });
          shaper_.release_sent(now, [&](Outgoing&& message) { transmit(std::move(message)); });
        }
        state.on_tick(Clock::now(), send_, !shaper_.idle());
        if (const auto& failure = state.failure()) {
          const std::string address =
              failure->address.empty() ? "address unknown" : failure->address;
          if (failure->timeout) {
            throw TimeoutError(failure->rank, address, failure->operation, failure->problem);
          }
          throw PeerError(failure->rank, address, failure->operation, failure->problem);
        }
        if (state.finished()) return;
      }
    } catch (const zmq::error_t& e) {
      throw Error(name_ + " (" + endpoint_ + "): ZeroMQ failed while serving: " + e.what());
    }
  }

 private:
  void handle(ShardState& state, std::vector<zmq::message_t>& frames) {
    // A ROUTER prefixes the sender's routing id; everything after it is the worker's message.
    const std::string peer = frames[0].to_string();
    const std::string address = frames.size() > 1 ? peer_address(frames[1]) : "";
    std::vector<Buffer> message;
    message.reserve(frames.size() - 1);
    for (std::size_t i = 1; i < frames.size(); ++i) {
      bytes_received_ += frames[i].size();
      message.push_back(to_buffer(std::move(frames[i])));
    }
    state.on_message(peer, message, Clock::now(), address, send_);
  }

  using Frames = std::vector<zmq::message_t>;

  // [routing id] [header] [payload]: the bytes the link is charged for are every frame after
  // the header (the payload; headers are not counted).
  static std::size_t payload_bytes(const Frames& frames) {
    std::size_t bytes = 0;
    for (std::size_t i = 2; i < frames.size(); ++i) bytes += frames[i].size();
    return bytes;
  }

  static bool is_heartbeat(const Frames& frames) {
    if (frames.size() != 2) return false;
    try {
      const auto header = wire::decode_header(
          std::span(static_cast<const std::byte*>(frames[1].data()), frames[1].size()));
      return header.type == wire::MessageType::kHeartbeat;
    } catch (const wire::WireError&) {
      return false;  // garbage waits in line like any message; the state rejects it there
    }
  }

  // Each reply goes to ZeroMQ the moment the state emits it (see ShardState's header), or,
  // with an emulated link, to the send queue; ERRORs skip the queue: they end a worker's run
  // and must not wait behind data (nor be lost when serve() throws right after them).
  void send(Outgoing&& message) {
    if (message.header.type == wire::MessageType::kError) return transmit(std::move(message));
    const std::size_t bytes = message.payload.size();
    shaper_.send(bytes, std::move(message), [this](Outgoing&& m) { transmit(std::move(m)); });
  }

  void transmit(Outgoing&& message) {
    std::string problem;
    try {
      if (send_message(router_, &message.peer, message.header, message.payload)) {
        bytes_sent_ += wire::kHeaderBytes + message.payload.size();
        const wire::Header& h = message.header;
        if (h.type == wire::MessageType::kReply && message.rank >= 0) {
          replies_.sent(message.rank, h.step, h.key_begin == range_.begin, h.key_end == range_.end,
                        message.payload.size(), Clock::now());
        }
      } else {
        problem = "its queue is full (it stopped reading)";
      }
    } catch (const zmq::error_t& e) {
      problem = e.what();  // EHOSTUNREACH: the worker disconnected
    }
    if (!problem.empty()) log(name_ + ": could not send " + message.to_string() + ": " + problem);
  }

  void read_monitor() {
    while (true) {
      std::vector<zmq::message_t> event = receive_message(monitor_);
      if (event.empty()) return;
      if (event[0].size() < 6) continue;
      // Frame 1 of a monitor event: a 16-bit event number, then a 32-bit value (host order).
      std::uint16_t id;
      std::uint32_t value;
      std::memcpy(&id, event[0].data(), sizeof(id));
      std::memcpy(&value, static_cast<const char*>(event[0].data()) + 2, sizeof(value));
      // A refused client retries every ~100 ms; one line per kind per 10 s is enough.
      const std::string what = describe_handshake_failure(id, value);
      Repeat& repeat = repeats_[what];
      const auto now = Clock::now();
      ++repeat.count;
      if (repeat.count > 1 && now - repeat.logged < kRepeatLogEvery) continue;
      log(name_ + ": refused a connection during the handshake: " + what +
          (repeat.count > 1 ? " (" + std::to_string(repeat.count) + " times so far)" : ""));
      repeat.logged = now;
    }
  }

  void log(const std::string& line) { options_.log(line); }

  struct Repeat {
    std::uint64_t count = 0;
    Clock::time_point logged;
  };

  PsShardOptions options_;
  std::string name_;
  std::mutex log_mutex_;
  // Declared before the sockets so it is destroyed after them: every socket belongs to it.
  zmq::context_t context_{1};
  std::unique_ptr<ZapHandler> zap_;
  zmq::socket_t router_;
  zmq::socket_t monitor_;
  std::string endpoint_;
  std::map<std::string, Repeat> repeats_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> served_{false};
  std::atomic<std::uint64_t> bytes_sent_{0};
  std::atomic<std::uint64_t> bytes_received_{0};
  LinkShaper<Outgoing, Frames> shaper_{options_.link};
  KeyRange range_{};  // this shard's keys (set once the options are validated)
  ShardTrace replies_{options_.trace, options_.shard};  // the reply spans, as they leave
  const ShardState::Sink send_ = [this](Outgoing&& message) { send(std::move(message)); };
};

PsShard::PsShard(const PsShardOptions& options) : impl_(std::make_unique<Impl>(options)) {}
PsShard::~PsShard() = default;
std::string PsShard::endpoint() const { return impl_->endpoint(); }
void PsShard::serve() { impl_->serve(); }
void PsShard::stop() { impl_->stop(); }
PsShardTraffic PsShard::traffic() const { return impl_->traffic(); }

}  // namespace gradsync
