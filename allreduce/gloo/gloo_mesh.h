// GlooMesh: the Gloo side of a Gloo communicator's rendezvous: Gloo's TCP device, the context
// whose full mesh of pairs connects every two ranks, and what errors say about each peer.
//
//   GlooMesh mesh(store, rank, size, options, grace);   // collective: blocks until all joined
//   ::gloo::allreduce(opts_on(mesh.context()));
//   int peer = mesh.peer_named_in(gloo_message);        // -1 if no rank's address is in it
//   mesh.close();                                       // every pair, at once, from any thread
//   mesh.close_after_peers(grace);                      // after every rank's last collective
//
// Joining: each rank publishes the addresses of its pairs under "<store_prefix>/" (through
// GlooStore, allreduce/gloo/gloo_store.h) and every pair of ranks connects; then the local
// address of each connection, under "<store_prefix>/addresses/<rank>", so that a peer's error can
// name a rank where Gloo's message gives only an address. Waits for every rank up to
// options.timeout; a rank that never comes is the Store's TimeoutError naming the keys still
// missing. The caller's thread has SIGPIPE blocked meanwhile, so that Gloo's event loop, which
// inherits its mask, never raises it.
//
// Sync pairs (options.pairs sync or busy_poll): a second full mesh, joined the same way under
// "<store_prefix>/sync/", whose pairs Gloo switches to sync mode (the thread that waits reads
// the socket itself, holding the pair's lock). The float allreduce runs there
// (sync_context()); everything else on the first mesh. Gloo cannot close a sync pair while a
// thread is blocked reading it (close takes that lock), so the mesh keeps a duplicate of each
// sync socket and close() shuts those down: the blocked read ends at once, and the peer reads
// end-of-file. A sync pair writes before it reads, so two ranks that send each other more than
// the kernel buffers wait for each other until the timeout: allreduce_sum cuts its calls into
// pieces of sync_message_floats(), whose messages the kernel always takes. Internal to
// allreduce/gloo/ (it includes Gloo's headers).
#pragma once

#include <gloo/context.h>
#include <gloo/transport/device.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "allreduce/gloo/gloo_options.h"
#include "allreduce/store.h"
#include "allreduce/tcp/socket.h"

namespace gradsync::gloo {

class GlooMesh {
 public:
  // For size >= 2. `grace`: how long a failing rank waits for what a peer published.
  GlooMesh(Store& store, int rank, int size, const GlooOptions& options,
           std::chrono::milliseconds grace);
  GlooMesh(const GlooMesh&) = delete;
  GlooMesh& operator=(const GlooMesh&) = delete;

  const std::shared_ptr<::gloo::Context>& context() const { return context_; }
  // The sync pairs' context, or null when options.pairs is async.
  const std::shared_ptr<::gloo::Context>& sync_context() const { return sync_context_; }
  // The most floats one halving_doubling call on sync pairs may reduce (its messages carry at
  // most half): net.core.wmem_max bytes up to Gloo's 32 MiB cap, what a send buffer always takes
  // however little the peer reads (Gloo sizes each pair's send buffer to its message, up to
  // that); the smallest over the ranks' hosts, agreed at joining.
  std::size_t sync_message_floats() const { return sync_message_floats_; }

  // Every read and write on the sync pairs from now on gives up after `left` (at least 1 ms):
  // the deadline of the collective about to run. Gloo set the pairs' timeout once, at joining.
  void limit_sync_waits(std::chrono::milliseconds left);
  int size() const { return size_; }

  // "ip:port" that `peer` listened on for us: the endpoint of our errors about it.
  const std::string& endpoint(int peer) const { return peers_[std::size_t(peer)].endpoint; }

  // The peer a Gloo message names by address, or -1. The listening addresses (known here) are
  // tried first, the addresses peers connected from (read once from the Store, up to the grace
  // period) after them. Only from the thread that runs the collectives.
  int peer_named_in(const std::string& message);

  // Fails whatever is pending on every pair (waits wake with Gloo's "Application timeout caused
  // pair closure") and closes the sockets, so that every peer reads end-of-file and fails at
  // once. Never waits on a peer; idempotent; from any thread.
  void close();

  // The orderly end, when this rank's collectives all completed: says goodbye to every peer and
  // waits, up to `within`, for every peer's goodbye, then close(). Without it a rank that
  // finishes its last collective first closes while a peer's final receive has arrived but not
  // yet been collected, and Gloo's waits (tcp Buffer, UnboundBuffer) check the pair's error
  // before their completions: that peer fails a collective that succeeded. A peer that never says
  // goodbye (busy elsewhere, or gone) costs at most `within`. Never throws. Only from the thread
  // that runs the collectives, or when none runs.
  void close_after_peers(std::chrono::milliseconds within);

  // The Store key where `rank` published how Gloo names its connections: set at joining, so it
  // is always there (what a quick read probes to see whether the Store still answers).
  std::string names_key(int rank) const;

 private:
  // What the errors say about another rank.
  struct Peer {
    std::string endpoint;  // ip:port it listened on for us
    // How Gloo's messages here may print it: the address it listened on for us, or the address
    // it connected from. (Gloo's connect() overwrites the second with the first when the peer
    // connected before this rank called connect(): a race in its rendezvous.)
    std::vector<std::string> gloo_names;
    bool published_read = false;  // the second one, read from the Store once needed
  };

  void join();
  std::shared_ptr<::gloo::Context> connect(const std::string& prefix);
  void learn_listening_addresses(const std::string& prefix);
  void join_sync_mesh();
  const std::vector<std::string>& gloo_names(int peer);

  Store& store_;
  const int rank_;
  const int size_;
  const GlooOptions options_;
  const std::chrono::milliseconds grace_;
  const std::string me_;  // "rank 3", for messages
  std::shared_ptr<::gloo::transport::Device> device_;
  std::shared_ptr<::gloo::Context> context_;       // after device_: the pairs close before the loop
  std::shared_ptr<::gloo::Context> sync_context_;  // null unless options.pairs is sync
  std::vector<tcp::Socket> sync_sockets_;  // duplicates of the sync pairs' sockets, for close()
  std::size_t sync_message_floats_ = 0;
  std::vector<Peer> peers_;  // by rank; empty for ourselves
  std::mutex close_mutex_;
};

}  // namespace gradsync::gloo
