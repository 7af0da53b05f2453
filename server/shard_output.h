// ShardOutput: where a shard's rules send what they cause: messages to workers, one-line log
// reports, and (ShardFailure) the reason a run ends. ShardState owns one and lends it to its
// sessions (ShardSessions) and its consistency policy, so every rule reports the same way.
//
//   ShardOutput out(options, range);
//   out.use(send);                                  // each call into ShardState: its Sink
//   out.send(reply);                                // hands the message to that Sink now
//   out.answer_error(peer, "worker 1 pushed ...");  // logged, and an ERROR to that worker
//
// Not thread-safe: the thread driving ShardState uses it. The Sink given to use() must outlive
// every send() until the next use() (ShardState sets it at the start of each call). The log
// function (options.log, else stderr) is called on that thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "server/key_range.h"
#include "server/message.h"
#include "server/shard_options.h"

namespace gradsync {

// Why the shard ended the run, for PsShard::serve() to throw as a PeerError / TimeoutError.
struct ShardFailure {
  int rank = -1;          // the worker at fault, -1 for none in particular
  std::string address;    // its network address when known ("127.0.0.1"), else ""
  std::string operation;  // "shard 0 step 14"
  std::string problem;    // what went wrong, one line
  bool timeout = false;   // a wait ran out (silence, HELLO, a worker holding the others up),
                          // rather than a protocol violation
};

class ShardOutput {
 public:
  using Sink = std::function<void(Outgoing&&)>;

  ShardOutput(const PsShardOptions& options, KeyRange range);

  void use(const Sink& send) { send_ = &send; }
  void send(Outgoing&& out) const { (*send_)(std::move(out)); }
  const Sink& sink() const { return *send_; }

  Outgoing error_to(const std::string& peer, const std::string& text) const;
  // A request the protocol forbids from a known worker: logged, and answered with an ERROR
  // saying why (the worker then fails with that reason instead of waiting).
  void answer_error(const std::string& peer, const std::string& why) const {
    log(name() + ": " + why);
    send(error_to(peer, why));
  }
  void log(const std::string& line) const;
  // "shard 0": how every log line and failure names this shard.
  const std::string& name() const { return name_; }

 private:
  std::uint32_t shard_;
  KeyRange range_;
  std::function<void(const std::string&)> log_;
  std::string name_;
  const Sink* send_ = nullptr;  // the current call's sink
};

}  // namespace gradsync
