#include "allreduce/gloo/gloo_header_check.h"

#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>

#include "allreduce/collective_kind.h"
#include "allreduce/gloo/sigpipe_blocked.h"

namespace gradsync::gloo {
namespace {

// The slot prefix of the header exchange, beside the reduce-scatter ring's 0x10 (Gloo's own
// collectives use 0x01..0x08, see gloo/types.h; the older algorithms' slot counter stays far
// below any prefixed slot): headers never meet another message.
constexpr std::uint8_t kHeaderSlotPrefix = 0x11;

// "rank 3" or "ranks 0, 2, 5".
std::string ranks_text(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  return text;
}

}  // namespace

std::string describe(const CollectiveHeader& header) {
  // A kind no build sends (only a foreign header could hold one) reads "unknown operation".
  const auto kind = header.kind >= 0 && header.kind <= std::int64_t(UINT32_MAX)
                        ? static_cast<CollectiveKind>(std::uint32_t(header.kind))
                        : CollectiveKind{0};
  return "collective #" + std::to_string(header.seq) + " " +
         describe_collective(kind, std::uint64_t(header.count), int(header.root));
}

HeaderExchange::HeaderExchange(::gloo::Context& context)
    : context_(context), all_(static_cast<std::size_t>(context.size)), buffers_(all_.size()) {
  for (int r = 0; r < context_.size; ++r) {
    if (r == context_.rank) continue;
    buffers_[std::size_t(r)] =
        context_.createUnboundBuffer(all_.data(), all_.size() * sizeof(CollectiveHeader));
  }
  const SigpipeBlocked no_sigpipe;  // the caller's thread: posting writes Gloo's notice to peers
  post_receives();
}

// Peer r's header lands in element r. Posting a receive sends the peer Gloo's notice at once.
// A pair that fails here (a peer left after its last collective) fails the next exchange, not
// the collective that has just succeeded, nor the communicator's construction.
void HeaderExchange::post_receives() {
  ++exchanges_;
  const std::uint64_t slot = ::gloo::Slot::build(kHeaderSlotPrefix, exchanges_);
  try {
    for (int r = 0; r < context_.size; ++r) {
      if (r == context_.rank) continue;
      buffers_[std::size_t(r)]->recv(r, slot, std::size_t(r) * sizeof(CollectiveHeader),
                                     sizeof(CollectiveHeader));
    }
  } catch (const std::exception&) {
    unposted_ = std::current_exception();
  }
}

std::vector<CollectiveHeader> HeaderExchange::exchange(const CollectiveHeader& mine,
                                                       Clock::time_point deadline) {
  if (unposted_) std::rethrow_exception(unposted_);
  const int rank = context_.rank;
  const std::size_t bytes = sizeof(CollectiveHeader);
  const std::uint64_t slot = ::gloo::Slot::build(kHeaderSlotPrefix, exchanges_);
  all_[std::size_t(rank)] = mine;
  // Every send at once, from element `rank`; each peer's receive for it is normally posted
  // already, so each goes out from here without waiting for the event loop.
  for (int r = 0; r < context_.size; ++r) {
    if (r != rank) buffers_[std::size_t(r)]->send(r, slot, std::size_t(rank) * bytes, bytes);
  }
  // In rank order: at the deadline, the rank waited for is the lowest one still missing.
  for (int r = 0; r < context_.size; ++r) {
    if (r == rank) continue;
    wait_recv(*buffers_[std::size_t(r)], deadline, [&] {
      return PeerWaitTimeout(
          "waiting for rank " + std::to_string(r) + " to send its header for this collective", r);
    });
  }
  for (int r = 0; r < context_.size; ++r) {
    if (r == rank) continue;
    wait_send(*buffers_[std::size_t(r)], deadline, [&] {
      return PeerWaitTimeout(
          "waiting for rank " + std::to_string(r) + " to take our header for this collective", r);
    });
  }
  // A copy before the next receives are posted: the next headers may land any moment after.
  std::vector<CollectiveHeader> all = all_;
  post_receives();
  return all;
}

std::optional<Desync> find_desync(std::span<const CollectiveHeader> all, int rank) {
  // The distinct headers, in the order of the lowest rank holding each, with their ranks.
  std::vector<std::pair<CollectiveHeader, std::vector<int>>> groups;
  for (int r = 0; r < int(all.size()); ++r) {
    const CollectiveHeader& h = all[std::size_t(r)];
    auto group =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == h; });
    if (group == groups.end()) {
      groups.push_back({h, {r}});
    } else {
      group->second.push_back(r);
    }
  }
  if (groups.size() <= 1) return std::nullopt;
  // max_element keeps the first of equals: on a tie, the group of the lowest rank.
  const auto majority = std::max_element(
      groups.begin(), groups.end(),
      [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
  std::string odd;
  int first_odd = -1;
  for (auto g = groups.begin(); g != groups.end(); ++g) {
    if (g == majority) continue;
    if (first_odd < 0) first_odd = g->second.front();
    odd += (odd.empty() ? "" : "; ") + ranks_text(g->second) +
           (g->second.size() == 1 ? " is in " : " are in ") + describe(g->first);
  }
  const std::vector<int>& most = majority->second;
  const bool in_majority = std::find(most.begin(), most.end(), rank) != most.end();
  return Desync{in_majority ? first_odd : most.front(),
                "desync: " + odd + (groups.size() > 2 ? "; but " : " but ") + ranks_text(most) +
                    (most.size() == 1 ? " is in " : " are in ") + describe(majority->first)};
}

}  // namespace gradsync::gloo
