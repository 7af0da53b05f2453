#include "experiments/bench/ps_loopback.h"

#include <chrono>
#include <mutex>
#include <thread>
#include <zmq.hpp>

#include "common/error.h"
#include "server/ps_client.h"
#include "server/ps_shard.h"
#include "worker/sgd.h"

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
    try {
      client_ = std::make_unique<PsClient>(
          PsClientOptions{0, 1, floats, endpoints, kTimeout, 1s, {}, {}});
      client_->wait(client_->init(params_));
    } catch (...) {
      stop_shards();
      throw;
    }
  }

  ~Impl() {
    // Not finished: a failure is already on its way; leave without waiting for BYEs.
    if (!threads_.empty()) stop_shards();
  }

  void round_trips(int count) {
    for (int i = 0; i < count; ++i) client_->wait(client_->push_pull(steps_++, grads_, params_));
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
    std::lock_guard<std::mutex> lock(failure_mutex_);
    if (!failure_.empty()) throw Error("bench ps: a shard failed: " + failure_);
  }

 private:
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
std::uint64_t PsLoopback::check() const { return impl_->check(); }
void PsLoopback::finish() { impl_->finish(); }

class ZmqEchoLoopback::Impl {
 public:
  explicit Impl(std::uint64_t floats) : payload_(floats, 0.5f) {
    router_.set(zmq::sockopt::linger, 0);
    router_.bind("tcp://127.0.0.1:*");
    dealer_.set(zmq::sockopt::linger, 0);
    dealer_.set(zmq::sockopt::rcvtimeo, static_cast<int>(kTimeout / 1ms));
    dealer_.connect(router_.get(zmq::sockopt::last_endpoint));
    echo_ = std::jthread([this](std::stop_token stop) { serve(stop); });
  }

  void round_trips(int count) {
    for (int i = 0; i < count; ++i) {
      // The caller's buffer itself, as PsClient sends a gradient: no copy, nothing to free.
      zmq::message_t out(
          payload_.data(), payload_.size() * sizeof(float), [](void*, void*) {}, nullptr);
      dealer_.send(out, zmq::send_flags::none);
      zmq::message_t back;
      if (!dealer_.recv(back)) {
        throw Error("bench ps: the raw ZeroMQ echo did not answer within 60 s");
      }
    }
  }

 private:
  void serve(std::stop_token stop) {
    zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
    while (!stop.stop_requested()) {
      if (zmq::poll(&item, 1, 50ms) == 0) continue;
      zmq::message_t id, body;
      (void)router_.recv(id);
      (void)router_.recv(body);
      router_.send(id, zmq::send_flags::sndmore);
      router_.send(body, zmq::send_flags::none);  // the received buffer itself: no copy
    }
  }

  std::vector<float> payload_;
  // Two contexts, as a shard and a worker process would have: one I/O thread each.
  zmq::context_t server_context_{1}, client_context_{1};
  zmq::socket_t router_{server_context_, zmq::socket_type::router};
  zmq::socket_t dealer_{client_context_, zmq::socket_type::dealer};
  std::jthread echo_;  // last: stopped and joined before the sockets close
};

ZmqEchoLoopback::ZmqEchoLoopback(std::uint64_t floats)
    : impl_(std::make_unique<Impl>(floats)) {}
ZmqEchoLoopback::~ZmqEchoLoopback() = default;
void ZmqEchoLoopback::round_trips(int count) { impl_->round_trips(count); }

}  // namespace gradsync
