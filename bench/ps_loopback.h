// The sides of the parameter-server benchmark (`gradsync bench ps`, gradsync_ps_bench), each
// ready to run round trips of one payload over 127.0.0.1.
//
//   PsLoopback ps(1 << 20, 1);        // K = 1 shard on its own thread, one client, INIT done
//   ps.round_trips(100);              // 100 push_pull + wait, as a worker's steps
//   ZmqRawLoopback echo(1 << 20, ZmqRawLoopback::kOneMessage, 1);
//   echo.round_trips(100);            // 100 DEALER -> ROUTER -> DEALER echoes of 4 MiB
//   ps.finish();                      // BYE, join the shards, rethrow a shard's failure
//
// PsLoopback: sync mode, momentum SGD (lr 0.01, momentum 0.9) on the shards; the gradient is a
// fixed pattern, so after any number of steps the parameters are known by replaying them with
// a local Sgd (check()).
//
// ZmqRawLoopback: raw ZeroMQ moving the same bytes, sent without a copy from the caller's
// buffer, no optimizer, nothing copied into place. Three layouts:
//   kOneMessage: the whole payload as one message over one connection, echoed (the received
//     frame itself, no copy): ZeroMQ's own best case for a single transfer, but nothing
//     overlaps (the echo starts once the last byte is in);
//   kAsPs: the ps's layout, echoed: `connections` ROUTERs (one per shard, each in its own
//     context and thread, as shard processes), the payload cut into the same chunks over the
//     same balanced ranges, every chunk sent before any is received; so the difference to the
//     ps is only what the ps adds (headers, the update, the copy into the parameters);
//   kStream: raw ZeroMQ loopback throughput, as libzmq's local_thr/remote_thr measure it: the
//     round trip's bytes (the payload twice) go one way, in the ps's chunks over the same
//     connections, and each server drops them as they come and acks once all are in. No reply
//     path: what a round trip costs beyond moving its bytes (its first chunk's reply waits for
//     the update and the way back) is not in it.
//
// Threads: each object is driven from one thread; they start and own their server threads.
// Every wait is bounded (60 s) and throws naming what it waited for; a failure on a server
// thread is rethrown from the next round_trips().
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
  std::uint64_t steps() const;  // round trips so far (the shards' SGD steps)
  // Parameters that differ from a local Sgd replaying steps() steps (0 when right), and those
  // that differ from the initial parameters (the steps moved them).
  std::uint64_t check() const;
  std::uint64_t moved() const;
  // Ends the run: the client says BYE, the shards return. Throws what a shard thread threw.
  void finish();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

class ZmqRawLoopback {
 public:
  enum class Layout { kOneMessage, kAsPs, kStream };
  static constexpr Layout kOneMessage = Layout::kOneMessage;
  static constexpr Layout kAsPs = Layout::kAsPs;
  static constexpr Layout kStream = Layout::kStream;

  ZmqRawLoopback(std::uint64_t floats, Layout layout, int connections);
  ~ZmqRawLoopback();
  ZmqRawLoopback(const ZmqRawLoopback&) = delete;
  ZmqRawLoopback& operator=(const ZmqRawLoopback&) = delete;

  void round_trips(int count);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradsync
