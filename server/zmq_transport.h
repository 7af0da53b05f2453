// The few ZeroMQ operations the shard and the client share: one protocol message is the
// frames [routing id (ROUTER side only)] [48-byte header] [payload, when payload_bytes > 0].
//
// Sending: payloads of kZeroCopyMinBytes or more go without a copy; ZeroMQ then holds
// `payload.owner` (a shared reference) until its I/O thread has written the bytes, and releases
// it from that thread. A Buffer with no owner must stay valid until the peer has answered or
// the socket's context has been closed. Smaller payloads are copied (cheaper than the
// bookkeeping). Receiving: every frame of one message, as ZeroMQ allocated it (no copy).
// None of this is thread-safe beyond ZeroMQ's rule: one socket, one thread at a time.
#pragma once

#include <chrono>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/wire_format.h"
#include "server/curve_keys.h"
#include "server/key_range.h"
#include "server/message.h"

namespace gradsync {

inline constexpr std::size_t kZeroCopyMinBytes = 64 * 1024;

// Sends one message without blocking. Returns false when the socket's queue is full (the peer
// is not reading); throws zmq::error_t otherwise, e.g. EHOSTUNREACH from a ROUTER with
// ROUTER_MANDATORY when `peer` has gone. `peer` is null on a DEALER.
bool send_message(zmq::socket_t& socket, const std::string* peer, const wire::Header& header,
                  const Buffer& payload);

// All frames of the next message, or none when nothing is waiting (never blocks).
std::vector<zmq::message_t> receive_message(zmq::socket_t& socket);

// Moves a received frame behind a Buffer that keeps it alive.
Buffer to_buffer(zmq::message_t&& frame);

// The frame's sender address as ZeroMQ reports it ("127.0.0.1"), or "" when unknown.
std::string peer_address(const zmq::message_t& frame);

// Socket options common to every gradsync socket: linger, and the largest frame accepted
// (ZeroMQ drops a connection that sends more, before it is ever buffered whole).
void set_common_options(zmq::socket_t& socket, std::chrono::milliseconds linger,
                        std::int64_t max_frame_bytes);

// Room on this socket, each way, for four requests' chunks of `range` (ZeroMQ's high-water
// marks, 1000 messages by default). A push_pull queues one message per chunk of the range at
// once, so a range of more than 1000 chunks (512 MiB) would find the queue full by default.
void set_queue_room(zmq::socket_t& socket, KeyRange range);

// CURVE on a shard's ROUTER (server with the shared secret key) and on a worker's DEALER
// (client whose own key pair is the shared pair, so the shard's ZAP handler recognises it).
void make_curve_server(zmq::socket_t& socket, const CurveKeys& keys);
void make_curve_client(zmq::socket_t& socket, const CurveKeys& keys);

}  // namespace gradsync
