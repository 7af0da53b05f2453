#include "bench/ps_loopback.h"

#include <chrono>
#include <mutex>
#include <thread>
#include <zmq.hpp>

#include "common/error.h"
#include "model/optimizer/sgd.h"
#include "server/ps_shard.h"
#include "server/zmq_transport.h"
#include "strategies/ps/ps_client.h"

namespace gradsync {
namespace {

using namespace std::chrono_literals;

constexpr auto kTimeout = 60s;
const SgdOptions kSgd{0.01, 0.9, 0.0};

}  // namespace

class PsLoopback::Impl {
 public:
  Impl(std::uint64_t floats, int shards) : grads_(floats), params_(floats), initial_(floats) {
    // Small values of both signs that vary along the buffer: a ps that mixed up ranges or
    // chunks, or skipped an update, ends with different parameters than the replay.
    for (std::uint64_t i = 0; i < floats; ++i) {
      grads_[i] = static_cast<float>(static_cast<int>(i % 17) - 8) * 1e-3f;
      initial_[i] = static_cast<float>(i % 13) * 1e-2f;
    }
    params_ = initial_;
    std::vector<std::string> endpoints;
    for (int k = 0; k < shards; ++k) {
      PsShardOptions options;
      options.shard = k;
      options.shards = shards;
      options.model_size = floats;
      options.sgd = kSgd;
      options.timeout = kTimeout;
      shards_.push_back(std::make_unique<PsShard>(options));
      endpoints.push_back(shards_.back()->endpoint());
    }
    try {
      for (auto& shard : shards_) {
        threads_.emplace_back([this, s = shard.get()] {
          try {
            s->serve();
          } catch (const std::exception& e) {
            std::lock_guard<std::mutex> lock(failure_mutex_);
            if (failure_.empty()) failure_ = e.what();
          }
        });
      }
      client_ = std::make_unique<PsClient>(
          PsClientOptions{0, 1, floats, endpoints, kTimeout, 1s, {}, {}});
      client_->wait(client_->init(params_));
    } catch (const std::exception& e) {
      stop_shards();
      rethrow_with_shard_failure(e);
    }
  }

  ~Impl() {
    // Not finished: a failure is already on its way; leave without waiting for BYEs.
    if (!threads_.empty()) stop_shards();
  }

  void round_trips(int count) {
    try {
      for (int i = 0; i < count; ++i) {
        client_->wait(client_->push_pull(steps_, grads_, params_));
        ++steps_;
      }
    } catch (const std::exception& e) {
      rethrow_with_shard_failure(e);
    }
  }

  std::uint64_t steps() const { return steps_; }

  std::uint64_t moved() const {
    std::uint64_t moved = 0;
    for (std::size_t i = 0; i < params_.size(); ++i) moved += params_[i] != initial_[i];
    return moved;
  }

  std::uint64_t check() const {
    std::vector<float> expected = initial_;
    Sgd sgd(expected.size(), kSgd);
    for (std::uint64_t s = 0; s < steps_; ++s) sgd.step(expected, grads_);
    std::uint64_t wrong = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) wrong += expected[i] != params_[i];
    return wrong;
  }

  void finish() {
    client_.reset();  // BYE to every shard: each serve() returns
    threads_.clear();
    if (const std::string failed = shard_failure(); !failed.empty()) {
      throw Error("bench ps" + failed);
    }
  }

 private:
  // Called from a catch block. A shard that failed says why the client failed (it could not
  // connect, or its request went unanswered); otherwise the client's own error (a TimeoutError
  // or PeerError) goes on as it is.
  [[noreturn]] void rethrow_with_shard_failure(const std::exception& e) {
    if (const std::string failed = shard_failure(); !failed.empty()) {
      throw Error(std::string(e.what()) + failed);
    }
    throw;
  }

  std::string shard_failure() {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    return failure_.empty() ? "" : "; a shard failed: " + failure_;
  }

  void stop_shards() {
    client_.reset();
    for (auto& shard : shards_) shard->stop();
    threads_.clear();
  }

  std::vector<float> grads_, params_, initial_;
  std::uint64_t steps_ = 0;
  std::vector<std::unique_ptr<PsShard>> shards_;
  std::mutex failure_mutex_;
  std::string failure_;
  std::vector<std::jthread> threads_;  // after the shards they serve: joined first
  std::unique_ptr<PsClient> client_;
};

PsLoopback::PsLoopback(std::uint64_t floats, int shards)
    : impl_(std::make_unique<Impl>(floats, shards)) {}
PsLoopback::~PsLoopback() = default;
void PsLoopback::round_trips(int count) { impl_->round_trips(count); }
std::uint64_t PsLoopback::steps() const { return impl_->steps(); }
std::uint64_t PsLoopback::check() const { return impl_->check(); }
std::uint64_t PsLoopback::moved() const { return impl_->moved(); }
void PsLoopback::finish() { impl_->finish(); }

namespace {

// One raw server: a ROUTER in a context of its own, on a thread of its own. It echoes every
// message as received, or, with `ack_every` bytes, drops what it receives (as libzmq's
// local_thr does) and sends one empty message back each time that many more bytes are in.
class RawServer {
 public:
  RawServer(KeyRange whole, std::uint64_t ack_every) : ack_every_(ack_every) {
    router_.set(zmq::sockopt::linger, 0);
    set_queue_room(router_, whole);  // as a shard's: room for a few payloads' chunks
    router_.bind("tcp://127.0.0.1:*");
    endpoint_ = router_.get(zmq::sockopt::last_endpoint);
    thread_ = std::jthread([this](std::stop_token stop) {
      try {
        serve(stop);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(failure_mutex_);
        failure_ = e.what();
      }
    });
  }
  const std::string& endpoint() const { return endpoint_; }
  std::string failure() {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    return failure_;
  }

 private:
  void serve(std::stop_token stop) {
    zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
    while (!stop.stop_requested()) {
      if (zmq::poll(&item, 1, 50ms) == 0) continue;
      zmq::message_t id, body;
      while (router_.recv(id, zmq::recv_flags::dontwait)) {
        (void)router_.recv(body);
        if (ack_every_ == 0) {
          router_.send(id, zmq::send_flags::sndmore);
          router_.send(body, zmq::send_flags::none);  // the received buffer itself: no copy
          continue;
        }
        received_ += body.size();
        if (received_ < ack_every_) continue;
        received_ -= ack_every_;
        router_.send(id, zmq::send_flags::sndmore);
        router_.send(zmq::message_t(), zmq::send_flags::none);
      }
    }
  }

  const std::uint64_t ack_every_;  // 0: echo
  std::uint64_t received_ = 0;
  zmq::context_t context_{1};
  zmq::socket_t router_{context_, zmq::socket_type::router};
  std::string endpoint_;
  std::mutex failure_mutex_;
  std::string failure_;
  std::jthread thread_;  // last: stopped and joined before the socket closes
};

}  // namespace

class ZmqRawLoopback::Impl {
 public:
  Impl(std::uint64_t floats, Layout layout, int connections)
      : payload_(floats, 0.5f), stream_(layout == Layout::kStream) {
    const KeyRange whole{0, floats};  // sizes every queue: no connection carries more
    if (layout == Layout::kOneMessage) {
      connections = 1;
      pieces_.push_back({0, whole});
    } else {
      // Exactly what PsClient sends for rank 0: the same chunks, in the same order.
      std::vector<std::vector<KeyRange>> chunks;
      for (const KeyRange& range : balanced_ranges(floats, connections)) {
        chunks.push_back(chunk_ranges(range));
      }
      pieces_ = send_order(chunks, 0);
    }
    for (int k = 0; k < connections; ++k) {
      // A stream's server acks once its connection carried the round trip's bytes: its pieces,
      // out and back, both one way.
      std::uint64_t ack_every = 0;
      std::size_t echoes = 0;
      for (const ShardPiece& piece : pieces_) {
        if (piece.shard != k) continue;
        ++echoes;
        if (stream_) ack_every += 2 * piece.keys.size() * sizeof(float);
      }
      // A server with nothing to count would echo instead of acking.
      GRADSYNC_CHECK(!stream_ || ack_every > 0, "a stream connection that carries no bytes");
      replies_per_round_.push_back(stream_ ? 1 : echoes);
      servers_.push_back(std::make_unique<RawServer>(whole, ack_every));
      dealers_.emplace_back(client_context_, zmq::socket_type::dealer);
      dealers_.back().set(zmq::sockopt::linger, 0);
      dealers_.back().set(zmq::sockopt::sndtimeo, static_cast<int>(kTimeout / 1ms));
      set_queue_room(dealers_.back(), whole);
      dealers_.back().connect(servers_.back()->endpoint());
    }
  }

  void round_trips(int count) {
    if (const std::string failed = server_failures(); !failed.empty()) {
      throw Error("bench ps: raw ZeroMQ" + failed);
    }
    std::vector<zmq::pollitem_t> items;
    for (zmq::socket_t& dealer : dealers_) items.push_back({dealer.handle(), 0, ZMQ_POLLIN, 0});
    for (int i = 0; i < count; ++i) {
      for (int pass = 0; pass < (stream_ ? 2 : 1); ++pass) {
        for (const ShardPiece& piece : pieces_) {
          // The caller's buffer itself, as PsClient sends a gradient: no copy, nothing to free.
          zmq::message_t out(
              payload_.data() + piece.keys.begin, piece.keys.size() * sizeof(float),
              [](void*, void*) {}, nullptr);
          if (!dealers_[piece.shard].send(out, zmq::send_flags::none)) {
            throw Error("bench ps: the raw ZeroMQ side took no message within 60 s" +
                        server_failures());
          }
        }
      }
      // An echo returns every piece; a stream, one ack per connection. More from a connection
      // than it owes (an ack too early, or twice) is a broken side, not a fast one.
      std::vector<std::size_t> received(dealers_.size(), 0);
      std::size_t owed = 0, bytes = 0;
      for (const std::size_t n : replies_per_round_) owed += n;
      const auto deadline = std::chrono::steady_clock::now() + kTimeout;
      while (owed > 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0 || zmq::poll(items, left) == 0) {
          throw Error("bench ps: the raw ZeroMQ side still owed " + std::to_string(owed) +
                      " messages after 60 s" + server_failures());
        }
        for (std::size_t k = 0; k < dealers_.size(); ++k) {
          zmq::message_t back;
          while (dealers_[k].recv(back, zmq::recv_flags::dontwait)) {
            if (++received[k] > replies_per_round_[k]) {
              throw Error("bench ps: raw ZeroMQ connection " + std::to_string(k) + " returned " +
                          std::to_string(received[k]) + " messages in a round that owed " +
                          std::to_string(replies_per_round_[k]));
            }
            --owed;
            bytes += back.size();
          }
        }
      }
      // An echo's pieces tile the payload: every byte of it must have come back. A stream's acks
      // are empty: its server counted the bytes.
      const std::size_t sent = stream_ ? 0 : payload_.size() * sizeof(float);
      if (bytes != sent) {
        throw Error("bench ps: the raw ZeroMQ side returned " + std::to_string(bytes) +
                    " bytes of " + std::to_string(sent));
      }
    }
  }

 private:
  std::string server_failures() {
    std::string text;
    for (auto& server : servers_) {
      if (const std::string f = server->failure(); !f.empty()) {
        text += "; a raw server failed: " + f;
      }
    }
    return text;
  }

  std::vector<float> payload_;
  const bool stream_;
  std::vector<ShardPiece> pieces_;              // connection (as "shard") and keys of each message
  std::vector<std::size_t> replies_per_round_;  // per connection
  std::vector<std::unique_ptr<RawServer>> servers_;
  // One client context (one I/O thread), as a worker's PsClient has; its sockets close first.
  zmq::context_t client_context_{1};
  std::vector<zmq::socket_t> dealers_;
};

ZmqRawLoopback::ZmqRawLoopback(std::uint64_t floats, Layout layout, int connections)
    : impl_(std::make_unique<Impl>(floats, layout, connections)) {}
ZmqRawLoopback::~ZmqRawLoopback() = default;
void ZmqRawLoopback::round_trips(int count) { impl_->round_trips(count); }

}  // namespace gradsync
