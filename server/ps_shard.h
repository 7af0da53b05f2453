// PsShard: one parameter-server shard process (ps-lite's KVServer and its Van): a ZeroMQ
// ROUTER bound to options.bind_host, feeding ShardState and sending what it answers.
//
//   PsShard shard(options);                        // binds now: endpoint() is known
//   std::thread t([&] { shard.serve(); });         // or serve() as the process's body
//   ... workers connect to shard.endpoint() ...
//   t.join();                                      // serve() returns once every worker said BYE
//
// Blocking: serve() blocks until every worker said BYE (returns), stop() was called (returns,
// after an ERROR "shard K stopped" to every connected worker), or the run fails (throws):
// a worker silent for longer than options.timeout (TimeoutError naming the rank, unless
// async/ssp with continue_without_dead_workers drops it), workers that never said HELLO within
// options.timeout (TimeoutError), a worker leaving a sync run midway (PeerError). Every
// connected worker is sent the reason as an ERROR before serve() throws. Malformed messages
// are logged and ignored; they never end serve().
//
// Threads: construct on any thread; call serve() once, from one thread; stop(), endpoint() and
// traffic() from any thread. With options.curve a small ZAP thread authenticates clients
// (ZapHandler). The destructor waits up to 1 s for unsent replies, then closes everything.
//
// Link emulation (options.link, network.link_gbps): the shard's NIC, full duplex. Each message
// received is queued until its payload would have come in at the link's rate (behind the other
// workers' messages: N workers pushing to one shard share its link), and each reply until it
// would have gone out; the serving loop polls until the next of those moments as well as for
// its sockets, so receiving and sending proceed side by side in its one thread. HEARTBEATs are
// handled on arrival and ERRORs sent at once: liveness and failures never wait behind data.
//
// Security: binds only to bind_host (127.0.0.1 unless told otherwise). With options.curve the
// traffic is encrypted and only clients holding the shared key pair can connect; without it
// anyone who can reach the port can join the run, so use it beyond loopback.
#pragma once

#include <memory>
#include <string>

#include "server/shard_options.h"

namespace gradsync {

// What a shard moved: every frame after the routing id, headers included (ps-lite's Van
// counts the same way). The busiest-node figure in summary.json comes from this.
struct PsShardTraffic {
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
};

class PsShard {
 public:
  // Throws ConfigError for invalid options, Error when it cannot bind.
  explicit PsShard(const PsShardOptions& options);
  ~PsShard();
  PsShard(const PsShard&) = delete;
  PsShard& operator=(const PsShard&) = delete;

  // "tcp://127.0.0.1:41234": the address workers connect to (the real port when port was 0).
  std::string endpoint() const;
  void serve();
  void stop();
  // Totals so far; any thread, any time (typically after serve() returned).
  PsShardTraffic traffic() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradsync
