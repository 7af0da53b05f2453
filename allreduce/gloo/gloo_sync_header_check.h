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
// figures). A peer that sends nothing fails the read at the pair's timeout (the communicator's,
// from the read's start, about the collective's deadline) with Gloo's "Read timeout" naming its
// address; `deadline` is not consulted. Headers are 32 bytes: a write never waits for the peer
// to read. Not thread-safe: the communicator's thread only. The context must outlive it.
// Internal to allreduce/gloo/ (it includes Gloo's headers).
#pragma once

#include <gloo/context.h>
#include <gloo/transport/buffer.h>

#include <memory>
#include <vector>

#include "allreduce/gloo/gloo_header_check.h"

namespace gradsync::gloo {

class SyncHeaderExchange final : public HeaderRound {
 public:
  // Takes the context's next slot: every rank must construct it at the same point among the
  // context's other users (the communicator: once, before any collective).
  explicit SyncHeaderExchange(::gloo::Context& context);

  std::vector<CollectiveHeader> exchange(const CollectiveHeader& mine,
                                         Clock::time_point deadline) override;

 private:
  const int rank_;
  CollectiveHeader mine_;              // what every send buffer sends
  std::vector<CollectiveHeader> all_;  // by rank: each peer's receive buffer is its element
  std::vector<std::unique_ptr<::gloo::transport::Buffer>> sends_, receives_;  // by rank
};

}  // namespace gradsync::gloo
