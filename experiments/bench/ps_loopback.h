// The two sides of the parameter-server benchmark (`gradsync bench ps`, gradsync_ps_bench), each
// ready to run round trips of one payload over 127.0.0.1.
//
//   PsLoopback ps(1 << 20, 1);        // K = 1 shard on its own thread, one client, INIT done
//   ps.round_trips(100);              // 100 push_pull + wait, as a worker's steps
//   ZmqEchoLoopback echo(1 << 20);
//   echo.round_trips(100);            // 100 DEALER -> ROUTER -> DEALER echoes of 4 MiB
//   ps.finish();                      // BYE, join the shards, rethrow a shard's failure
//
// PsLoopback: sync mode, momentum SGD (lr 0.01, momentum 0.9) on the shards; the gradient is a
// fixed pattern, so after any number of steps the parameters are known by replaying them with
// a local Sgd (check()). ZmqEchoLoopback: one message of the same bytes, sent without a copy
// from the caller's buffer and echoed without a copy (the received frame itself), in two
// contexts with one I/O thread each, as a shard process and a worker process would have.
//
// Threads: each object is driven from one thread; they start and own their server threads.
// Every wait is bounded (the client's and shards' 60 s timeout; the echo's 60 s receive
// timeout) and throws naming what it waited for.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gradsync {

class PsLoopback {
 public:
  PsLoopback(std::uint64_t floats, int shards);
  ~PsLoopback();
  PsLoopback(const PsLoopback&) = delete;
  PsLoopback& operator=(const PsLoopback&) = delete;

  void round_trips(int count);
  // Parameters that differ from a local Sgd replaying every step so far (0 when right).
  std::uint64_t check() const;
  // Ends the run: the client says BYE, the shards return. Throws what a shard thread threw.
  void finish();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

class ZmqEchoLoopback {
 public:
  explicit ZmqEchoLoopback(std::uint64_t floats);
  ~ZmqEchoLoopback();
  ZmqEchoLoopback(const ZmqEchoLoopback&) = delete;
  ZmqEchoLoopback& operator=(const ZmqEchoLoopback&) = delete;

  void round_trips(int count);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradsync
