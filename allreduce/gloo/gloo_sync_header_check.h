// The desync check's header round (gloo_header_check.h) on sync pairs (gloo_mesh.h): the
// communicator's thread writes its 32-byte header to every peer, then reads each peer's from its
// socket, with Gloo's older buffers (one send and one receive buffer per peer, registered once
// on a slot of their own), which sync pairs serve where unbound buffers are not.
//
//   SyncHeaderExchange headers(*mesh.sync_context());   // collective: each rank, once, in order
//   auto all = headers.exchange(mine, deadline);
//
// On async pairs the same round costs each rank two hand-offs between Gloo's event loop and the
// waiting thread; here it is one write and one read per peer (allreduce/README.md has the
// figures). Each write and read is limited to what is left of `deadline` (`limit_waits` sets the
// sync sockets' timeouts), so a peer that sends nothing fails the round by the deadline, with
// Gloo's "Read timeout" naming its address. Headers are 32 bytes: a write never waits for the
// peer to read. Not thread-safe: the communicator's thread only. The context must outlive it.
// Internal to allreduce/gloo/ (it includes Gloo's headers).
#pragma once

#include <gloo/context.h>
#include <gloo/transport/buffer.h>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "allreduce/gloo/gloo_header_check.h"

namespace gradsync::gloo {

class SyncHeaderExchange final : public HeaderRound {
 public:
  // Takes the context's next slot: every rank must construct it at the same point among the
  // context's other users (the communicator: once, before any collective). `limit_waits(left)`
  // bounds the sync pairs' next reads and writes (GlooMesh::limit_sync_waits).
  SyncHeaderExchange(::gloo::Context& context,
                     std::function<void(std::chrono::milliseconds)> limit_waits);

  std::vector<CollectiveHeader> exchange(const CollectiveHeader& mine,
                                         Clock::time_point deadline) override;

 private:
  const int rank_;
  const std::function<void(std::chrono::milliseconds)> limit_waits_;
  CollectiveHeader mine_;              // what every send buffer sends
  std::vector<CollectiveHeader> all_;  // by rank: each peer's receive buffer is its element
  std::vector<std::unique_ptr<::gloo::transport::Buffer>> sends_, receives_;  // by rank
};

}  // namespace gradsync::gloo
