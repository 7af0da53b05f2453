#include "server/zmq_transport.h"

#include <algorithm>
#include <array>
#include <limits>
#include <memory>

#include "common/error.h"

namespace gradsync {

bool send_message(zmq::socket_t& socket, const std::string* peer, const wire::Header& header,
                  const Buffer& payload) {
  std::array<std::byte, wire::kHeaderBytes> head;
  wire::encode_header(header, head);
  const bool has_payload = header.payload_bytes > 0;
  GRADSYNC_CHECK(payload.size() == header.payload_bytes, "payload does not match its header");
  // Only the first frame can fail with EAGAIN: ZeroMQ accepts the rest of a message whose
  // first frame it took (messages are atomic).
  const auto first_flags = zmq::send_flags::dontwait | zmq::send_flags::sndmore;
  if (peer != nullptr) {
    if (!socket.send(zmq::buffer(*peer), first_flags)) return false;
  }
  const auto head_flags =
      zmq::send_flags::dontwait | (has_payload ? zmq::send_flags::sndmore : zmq::send_flags::none);
  if (!socket.send(zmq::buffer(head), head_flags) && peer == nullptr) return false;
  if (!has_payload) return true;

  zmq::message_t body;
  if (payload.size() >= kZeroCopyMinBytes) {
    // Zero copy: ZeroMQ calls `release` from its I/O thread once the bytes are written,
    // dropping our reference to the owner (the snapshot, or nothing for a caller's span).
    auto keep = std::make_unique<std::shared_ptr<const void>>(payload.owner);
    auto release = [](void*, void* hint) {
      delete static_cast<std::shared_ptr<const void>*>(hint);
    };
    body = zmq::message_t(const_cast<std::byte*>(payload.bytes.data()), payload.size(), release,
                          keep.get());
    keep.release();  // owned by the message now
  } else {
    body = zmq::message_t(payload.bytes.data(), payload.size());
  }
  socket.send(body, zmq::send_flags::dontwait);
  return true;
}

std::vector<zmq::message_t> receive_message(zmq::socket_t& socket) {
  std::vector<zmq::message_t> frames;
  zmq::message_t frame;
  if (!socket.recv(frame, zmq::recv_flags::dontwait)) return frames;
  bool more = frame.more();
  frames.push_back(std::move(frame));
  // The remaining frames are already here: ZeroMQ delivers a message whole or not at all.
  while (more) {
    zmq::message_t next;
    (void)socket.recv(next, zmq::recv_flags::none);
    more = next.more();
    frames.push_back(std::move(next));
  }
  return frames;
}

Buffer to_buffer(zmq::message_t&& frame) {
  auto owned = std::make_shared<zmq::message_t>(std::move(frame));
  return {std::span<const std::byte>(static_cast<const std::byte*>(owned->data()), owned->size()),
          owned};
}

std::string peer_address(const zmq::message_t& frame) {
  const char* address = zmq_msg_gets(const_cast<zmq_msg_t*>(frame.handle()), "Peer-Address");
  return address != nullptr ? address : "";
}

void set_common_options(zmq::socket_t& socket, std::chrono::milliseconds linger,
                        std::int64_t max_frame_bytes) {
  socket.set(zmq::sockopt::linger, static_cast<int>(linger.count()));
  // libzmq checks the limit against the frame as it arrives, which under CURVE carries the
  // box's nonce, MAC and command header on top of the payload: without the slack an encrypted
  // frame of exactly the allowed payload would be refused and the connection silently dropped.
  constexpr std::int64_t kCurveFrameSlack = 256;
  socket.set(zmq::sockopt::maxmsgsize, max_frame_bytes + kCurveFrameSlack);
}

void set_queue_room(zmq::socket_t& socket, KeyRange range) {
  constexpr std::size_t kZeroMqDefault = 1000;
  constexpr std::size_t kRequests = 4;
  const std::size_t messages = kRequests * chunk_ranges(range).size();
  const int room = static_cast<int>(std::min<std::size_t>(std::max(kZeroMqDefault, messages),
                                                          std::numeric_limits<int>::max()));
  socket.set(zmq::sockopt::sndhwm, room);
  socket.set(zmq::sockopt::rcvhwm, room);
}

void make_curve_server(zmq::socket_t& socket, const CurveKeys& keys) {
  if (keys.secret_key.empty()) {
    throw Error("CURVE: a shard needs the secret key of the shared pair, the key file has none");
  }
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, keys.secret_key);
  // Any domain makes libzmq consult the ZAP handler; naming ours keeps it explicit.
  socket.set(zmq::sockopt::zap_domain, "gradsync");
}

void make_curve_client(zmq::socket_t& socket, const CurveKeys& keys) {
  if (keys.secret_key.empty()) {
    throw Error("CURVE: a worker needs the secret key of the shared pair, the key file has none");
  }
  socket.set(zmq::sockopt::curve_serverkey, keys.public_key);
  socket.set(zmq::sockopt::curve_publickey, keys.public_key);
  socket.set(zmq::sockopt::curve_secretkey, keys.secret_key);
}

}  // namespace gradsync
