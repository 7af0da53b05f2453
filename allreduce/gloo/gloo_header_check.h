// The desync check of the Gloo communicator: before each collective every rank sends every other
// rank a 32-byte header (operation, element count, root, sequence number) and compares the N it
// then holds, so that ranks that issued mismatched collectives fail with a desync error naming
// both sides before any payload moves (Gloo's ring_chunked and halving_doubling would otherwise
// take the other's bytes by their slot counter and fail an assertion that ends the process).
//
//   const CollectiveHeader mine{std::int64_t(CollectiveKind::kAllreduceSum), 1000, 0, seq};
//   HeaderExchange headers(context);                        // once, after joining
//   auto all = headers.exchange(mine, deadline);            // blocks; throws on a timeout
//   if (auto desync = find_desync(all, rank)) throw PeerError(desync->peer, ..., desync->problem);
//
// Every rank ends with the same N headers, so every rank reaches the same verdict, and the same
// message, by itself: no rank has to tell another. The operations, and how they read, are
// TcpRing's and the MPI backend's (allreduce/collective_kind.h).
//
// Cost: N-1 small messages each way, all at once, per collective: one message's latency and one
// wake-up of the waiting thread (see HeaderExchange, and allreduce/README.md for the figures).
// Internal to allreduce/gloo/ (it includes Gloo's headers).
#pragma once

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "allreduce/gloo/gloo_waits.h"

namespace gradsync::gloo {

// What a rank says about the collective it starts: the same on every rank unless they disagree.
// `count` is the collective's total elements, as TcpRing counts them (an allgather's output, a
// reduce-scatter's input; a barrier's 0). Native byte order: one build on one architecture.
struct CollectiveHeader {
  std::int64_t kind = 0;  // CollectiveKind
  std::int64_t count = 0;
  std::int64_t root = 0;  // broadcast root, else 0
  std::int64_t seq = 0;   // the collective's sequence number, 1-based
  bool operator==(const CollectiveHeader&) const = default;
};
static_assert(sizeof(CollectiveHeader) == 32, "a wire format");

// "collective #7 allreduce avg of 1000 floats".
std::string describe(const CollectiveHeader& header);

// The exchange, for one communicator's collectives in order. Each rank's receives for the next
// collective's headers are posted as soon as the last exchange is done (the first ones at
// construction), so that Gloo's "ready to receive" notice has reached the peer long before it
// sends: a header then leaves at once from the sender's thread, and the exchange costs one
// one-way message and one wake-up rather than a notice and a message both ways. The messages
// travel on a slot of their own, keyed by the exchange's number, so they never meet a payload's.
// Not thread-safe: the communicator's thread only. The context must outlive it.
// (On sync pairs, where unbound buffers do not work, SyncHeaderExchange of
// gloo_sync_header_check.h does the same.)
class HeaderRound {
 public:
  virtual ~HeaderRound() = default;
  // Sends `mine` to every other rank and receives theirs, all by `deadline`; returns every rank's
  // header, by rank. Throws PeerWaitTimeout naming the lowest rank still missing at the deadline,
  // or Gloo's exception when a pair fails or times out (after either, this object must not be
  // used again).
  virtual std::vector<CollectiveHeader> exchange(const CollectiveHeader& mine,
                                                 Clock::time_point deadline) = 0;
};

class HeaderExchange final : public HeaderRound {
 public:
  explicit HeaderExchange(::gloo::Context& context);
  HeaderExchange(const HeaderExchange&) = delete;
  HeaderExchange& operator=(const HeaderExchange&) = delete;

  std::vector<CollectiveHeader> exchange(const CollectiveHeader& mine,
                                         Clock::time_point deadline) override;

 private:
  void post_receives();

  ::gloo::Context& context_;
  std::vector<CollectiveHeader> all_;  // by rank: ours at our rank, the others' as they arrive
  // One per peer, each over all of all_ (their writes never overlap): a buffer counts completions
  // but remembers only the last rank, and a timeout must name the peer that is missing.
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> buffers_;
  std::uint32_t exchanges_ = 0;  // the slot of the receives posted: one per exchange
  std::exception_ptr unposted_;  // why the receives for the next exchange could not be posted
};

struct Desync {
  int peer;             // a rank `rank` disagrees with, for the PeerError
  std::string problem;  // "desync: rank 1 is in ... but ranks 0, 2 are in ..."
};

// Nothing when every header agrees. Otherwise the headers most ranks hold (on a tie, those of the
// lowest rank) are the majority; the problem names the ranks of every other header first, then
// the majority's: "desync: rank 1 is in collective #7 allreduce of 6 floats but ranks 0, 2 are in
// collective #7 allreduce of 5 floats" (further odd headers join with "; "). `peer` is the lowest
// odd rank for a rank of the majority, and the lowest rank of the majority for the others.
std::optional<Desync> find_desync(std::span<const CollectiveHeader> all, int rank);

}  // namespace gradsync::gloo
