// ZapHandler: ZeroMQ's authentication hook (ZAP, RFC 27) for a CURVE shard. libzmq asks it
// about every CURVE client of every socket in `context` that has a ZAP domain; it accepts only
// clients whose public key is the shared public key, so a client with another key pair cannot
// complete the handshake (and a client without CURVE fails even earlier, at the mechanism).
//
//   ZapHandler zap(context, keys.public_key, log);   // before the shard's socket binds
//
// Runs one thread with a REP socket on inproc://zeromq.zap.01 of `context` (one handler per
// context: each PsShard has its own). The destructor stops and joins it within ~100 ms; it must
// run before the context closes. `log` is called from that thread, once per refused key.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <zmq.hpp>

namespace gradsync {

class ZapHandler {
 public:
  ZapHandler(zmq::context_t& context, const std::string& allowed_public_z85,
             std::function<void(const std::string&)> log);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

 private:
  void run();

  zmq::socket_t socket_;
  std::string allowed_;  // 32 raw bytes, as ZAP presents CURVE keys
  std::function<void(const std::string&)> log_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace gradsync
