#include "strategies/ps/shard_link.h"

#include "common/error.h"
#include "server/local_endpoint.h"
#include "server/zmq_transport.h"

namespace gradsync {
namespace {
using Clock = std::chrono::steady_clock;
constexpr std::int64_t kHeartbeatMaxFrame = 4096;  // a heartbeat socket never receives data
constexpr int kHeartbeatQueue = 4;  // beats waiting for a shard that is not reading: stale
}  // namespace

ShardLink::ShardLink(zmq::context_t& context, int shard, std::string endpoint, KeyRange range,
                     const std::optional<CurveKeys>& curve, std::int64_t max_frame_bytes,
                     bool same_host_ipc)
    : shard_(shard),
      endpoint_(std::move(endpoint)),
      range_(range),
      socket_(context, zmq::socket_type::dealer) {
  // Linger 0 until close(): a client that failed must not wait on a dead shard. The frame cap
  // keeps a hostile "shard" from making the worker buffer more than a shard's whole range.
  set_common_options(socket_, std::chrono::milliseconds(0), max_frame_bytes);
  set_queue_room(socket_, range_);  // a push_pull queues all of its range's chunks at once
  if (curve) make_curve_client(socket_, *curve);
  try {
    socket_.connect(same_host_ipc ? same_host_endpoint(endpoint_) : endpoint_);
  } catch (const zmq::error_t& e) {
    throw Error("PsClient: shard " + std::to_string(shard_) + " endpoint '" + endpoint_ +
                "': " + e.what());
  }
}

void ShardLink::send(const wire::Header& header, const Buffer& payload,
                     const std::string& operation) {
  if (!send_message(socket_, nullptr, header, payload)) {
    throw PeerError(name(), shard_, endpoint_, operation,
                    "send queue full: the shard stopped reading");
  }
}

ShardLink::Message ShardLink::read(const std::string& operation) {
  std::optional<Message> message = try_read(operation);
  if (!message) throw PeerError(name(), shard_, endpoint_, operation, "no message after poll");
  return std::move(*message);
}

std::optional<ShardLink::Message> ShardLink::try_read(const std::string& operation) {
  std::vector<zmq::message_t> frames = receive_message(socket_);
  if (frames.empty()) return std::nullopt;
  Message message;
  try {
    message.header = wire::decode_header(
        std::span(static_cast<const std::byte*>(frames[0].data()), frames[0].size()));
  } catch (const wire::WireError& e) {
    throw PeerError(name(), shard_, endpoint_, operation,
                    std::string("malformed reply: ") + e.what());
  }
  const bool has_payload = frames.size() == 2;
  if (frames.size() > 2 || has_payload != (message.header.payload_bytes > 0) ||
      (has_payload && frames[1].size() != message.header.payload_bytes)) {
    throw PeerError(name(), shard_, endpoint_, operation,
                    "malformed reply: " + std::to_string(frames.size()) + " frames for " +
                        message.header.to_string());
  }
  if (message.header.type == wire::MessageType::kError) {
    throw PeerError(name(), shard_, endpoint_, operation, frames[1].to_string());
  }
  if (has_payload) message.payload = std::move(frames[1]);
  return message;
}

void ShardLink::close(std::chrono::milliseconds linger) {
  socket_.set(zmq::sockopt::linger, static_cast<int>(linger.count()));
  socket_.close();
}

void say_hello(std::deque<ShardLink>& links, int rank, int world_size, std::uint64_t model_size,
               std::uint64_t run_id, std::chrono::milliseconds timeout) {
  const auto hello =
      wire::make_header(wire::MessageType::kHello, rank, run_id, 0, model_size, 0, world_size);
  const std::string operation = "the HELLO handshake";
  for (ShardLink& link : links) link.send(hello, {}, operation);
  std::vector<ShardLink*> waiting;
  for (ShardLink& link : links) waiting.push_back(&link);
  const auto deadline = Clock::now() + timeout;
  std::vector<zmq::pollitem_t> items;
  while (!waiting.empty()) {
    items.clear();
    for (ShardLink* link : waiting) items.push_back({link->socket().handle(), 0, ZMQ_POLLIN, 0});
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 || zmq::poll(items, left) == 0) {
      const ShardLink& link = *waiting[0];
      throw TimeoutError(link.name(), link.shard(), link.endpoint(), operation,
                         "no answer within " + seconds_text(timeout) +
                             ": is it running? wrong or missing CURVE key?");
    }
    std::vector<ShardLink*> still;
    for (std::size_t i = 0; i < items.size(); ++i) {
      ShardLink& link = *waiting[i];
      if (!(items[i].revents & ZMQ_POLLIN)) {
        still.push_back(&link);
        continue;
      }
      const wire::Header header = link.read(operation).header;
      const KeyRange range = link.range();
      if (header.type != wire::MessageType::kHelloAck ||
          header.sender != static_cast<std::uint32_t>(link.shard()) ||
          KeyRange{header.key_begin, header.key_end} != range) {
        throw PeerError(link.name(), link.shard(), link.endpoint(), operation,
                        "answered " + header.to_string() + ", this worker expects shard " +
                            std::to_string(link.shard()) + " of " + std::to_string(links.size()) +
                            " serving " + wire::range_text(range.begin, range.end) +
                            ": do all processes agree on the shard count and endpoint order?");
      }
    }
    waiting = std::move(still);
  }
}

HeartbeatSender::HeartbeatSender(zmq::context_t& context, std::vector<std::string> endpoints,
                                 std::uint32_t rank, std::uint64_t run_id,
                                 std::chrono::milliseconds interval, std::optional<CurveKeys> curve)
    : endpoints_(std::move(endpoints)),
      rank_(rank),
      run_id_(run_id),
      interval_(interval),
      curve_(std::move(curve)) {
  thread_ = std::thread([this, &context] { run(context); });
}

HeartbeatSender::~HeartbeatSender() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void HeartbeatSender::run(zmq::context_t& context) {
  try {
    std::vector<zmq::socket_t> sockets;
    for (const std::string& endpoint : endpoints_) {
      // The shard matches heartbeats by rank: this connection never says HELLO.
      zmq::socket_t socket(context, zmq::socket_type::dealer);
      set_common_options(socket, std::chrono::milliseconds(0), kHeartbeatMaxFrame);
      socket.set(zmq::sockopt::sndhwm, kHeartbeatQueue);
      if (curve_) make_curve_client(socket, *curve_);
      socket.connect(endpoint);
      sockets.push_back(std::move(socket));
    }
    const auto beat = wire::make_header(wire::MessageType::kHeartbeat, rank_, run_id_, 0, 0, 0);
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, interval_, [&] { return stopping_; })) {
      for (zmq::socket_t& socket : sockets) send_message(socket, nullptr, beat, {});
    }
  } catch (const zmq::error_t& e) {
    // ETERM: the context is closing, the client with it. Nothing to report to anyone.
    if (e.num() != ETERM) fail(e.what());
  } catch (const std::exception& e) {
    fail(e.what());
  }
}

void HeartbeatSender::fail(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  failure_ = "heartbeats to the shards stopped: " + why;
}

std::string HeartbeatSender::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

}  // namespace gradsync
