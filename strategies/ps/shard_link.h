// ShardLink: a worker's connection to one shard, a ZeroMQ DEALER (ps-lite's Van, one per
// server). Requests to the shard are answered in order on it. RAII: the socket closes with
// the link, with the linger last set (0 until close(linger) says otherwise).
//
//   ShardLink link(context, 0, "tcp://127.0.0.1:5555", range, curve, max_frame);
//   link.send(header, payload, "push_pull step 3 with shard 0");
//   if (poll says readable) auto [header, payload] = link.read("push_pull step 3 ...");
//
// Not thread-safe (one ZeroMQ socket). `payload` follows zmq_transport.h's rules: a large one
// is sent from the caller's bytes, which must stay valid until the shard answered or the
// context closed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/wire_format.h"
#include "server/curve_keys.h"
#include "server/key_range.h"
#include "server/message.h"

namespace gradsync {

class ShardLink {
 public:
  struct Message {
    wire::Header header;
    zmq::message_t payload;  // empty when the header announces none
  };

  // Connects (ZeroMQ connects in the background; nothing blocks) to `endpoint`, or with
  // `same_host_ipc` to the shard's ipc address where `endpoint` is on loopback
  // (server/local_endpoint.h); errors name `endpoint` all the same. Throws Error for an
  // endpoint ZeroMQ cannot parse.
  ShardLink(zmq::context_t& context, int shard, std::string endpoint, KeyRange range,
            const std::optional<CurveKeys>& curve, std::int64_t max_frame_bytes,
            bool same_host_ipc = false);

  int shard() const { return shard_; }
  std::string name() const { return "shard " + std::to_string(shard_); }  // in its errors
  const std::string& endpoint() const { return endpoint_; }
  const KeyRange& range() const { return range_; }
  zmq::socket_t& socket() { return socket_; }

  // Queues one message; throws PeerError naming `operation` when the shard stopped reading.
  void send(const wire::Header& header, const Buffer& payload, const std::string& operation);
  // The next message, which must be waiting (poll first). An ERROR from the shard, or
  // anything malformed, throws PeerError naming `operation` and the shard's reason.
  Message read(const std::string& operation);
  // As read(), but nothing when no message is waiting (never blocks).
  std::optional<Message> try_read(const std::string& operation);
  // Closes the socket, letting queued messages go for at most `linger`.
  void close(std::chrono::milliseconds linger);

 private:
  int shard_;
  std::string endpoint_;
  KeyRange range_;
  zmq::socket_t socket_;
};

// The HELLO handshake over every link: HELLO (rank, world size, model size, the run's id:
// common/run_id.h) to each shard, then
// each one's HELLO_ACK, all within `timeout`. An ack must come from the link's shard and name
// the link's range: a shard started with another shard count, or at another position in the
// endpoint list, would otherwise receive the wrong keys. Throws PeerError with the shard's
// reason when it refuses (or acks the wrong range), TimeoutError naming the first shard that did
// not answer (not running, or a CURVE key that does not match: both look the same to ZeroMQ).
void say_hello(std::deque<ShardLink>& links, int rank, int world_size, std::uint64_t model_size,
               std::uint64_t run_id, std::chrono::milliseconds timeout);

// HeartbeatSender: HEARTBEAT (rank, run id) to every shard every `interval`, from its own thread
// and its own DEALERs (ZeroMQ sockets are not thread-safe), so a worker busy computing still looks
// alive. A beat that cannot be queued is dropped, never waited for. The destructor stops and joins
// the thread (within one interval's wake-up); it must run before the context closes.
// If the thread fails (anything but the context closing), it stops and failure() says why:
// the owner must ask, or the shards would later call a working worker dead.
class HeartbeatSender {
 public:
  HeartbeatSender(zmq::context_t& context, std::vector<std::string> endpoints, std::uint32_t rank,
                  std::uint64_t run_id, std::chrono::milliseconds interval,
                  std::optional<CurveKeys> curve);
  ~HeartbeatSender();
  HeartbeatSender(const HeartbeatSender&) = delete;
  HeartbeatSender& operator=(const HeartbeatSender&) = delete;

  // Empty while heartbeats go out; otherwise why they stopped.
  std::string failure() const;

 private:
  void run(zmq::context_t& context);
  void fail(const std::string& why);

  std::vector<std::string> endpoints_;
  std::uint32_t rank_;
  std::uint64_t run_id_;
  std::chrono::milliseconds interval_;
  std::optional<CurveKeys> curve_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::string failure_;
  std::thread thread_;
};

}  // namespace gradsync
