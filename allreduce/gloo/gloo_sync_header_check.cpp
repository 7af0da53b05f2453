#include "allreduce/gloo/gloo_sync_header_check.h"

#include <gloo/transport/pair.h>

#include <utility>

namespace gradsync::gloo {

SyncHeaderExchange::SyncHeaderExchange(::gloo::Context& context,
                                       std::function<void(std::chrono::milliseconds)> limit_waits)
    : rank_(context.rank),
      limit_waits_(std::move(limit_waits)),
      all_(static_cast<std::size_t>(context.size)),
      sends_(all_.size()),
      receives_(all_.size()) {
  const int slot = context.nextSlot();
  for (int r = 0; r < context.size; ++r) {
    if (r == rank_) continue;
    auto& pair = context.getPair(r);
    receives_[std::size_t(r)] =
        pair->createRecvBuffer(slot, &all_[std::size_t(r)], sizeof(CollectiveHeader));
    sends_[std::size_t(r)] = pair->createSendBuffer(slot, &mine_, sizeof(CollectiveHeader));
  }
}

// A peer's next header can only follow its part in this collective, which needs ours: each
// receive buffer holds one header at a time. A sync pair's reads come in the socket's order, so
// a header never overtakes the payload before it.
std::vector<CollectiveHeader> SyncHeaderExchange::exchange(const CollectiveHeader& mine,
                                                           Clock::time_point deadline) {
  mine_ = mine;
  // 32-byte writes never wait for the peer: only the reads need the deadline.
  for (std::size_t r = 0; r < sends_.size(); ++r) {
    if (sends_[r]) sends_[r]->send();
  }
  for (std::size_t r = 0; r < receives_.size(); ++r) {
    if (!receives_[r]) continue;
    limit_waits_(time_left(deadline));  // a late peer before leaves less for the next
    receives_[r]->waitRecv();
  }
  for (std::size_t r = 0; r < sends_.size(); ++r) {
    if (sends_[r]) sends_[r]->waitSend();
  }
  all_[std::size_t(rank_)] = mine;
  return all_;
}

}  // namespace gradsync::gloo
