#include "allreduce/gloo/gloo_ring_reduce_scatter.h"

#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <string>
#include <vector>

#include "allreduce/half_sum.h"

namespace gradsync::gloo {
namespace {

// The slot prefix of the ring (Gloo's own collectives use 0x01..0x08, each with the tag below
// it, see gloo/types.h; the header check uses 0x11): its messages never meet another collective's.
constexpr std::uint8_t kReduceScatterSlotPrefix = 0x10;

// Step k = 1..N-1 sends block (r - k) to rank r + 1 and receives block (r - k - 1) from rank
// r - 1 into a scratch block, then adds it into ours: what arrives at step k leaves at step k+1,
// and the last step completes block r - N = r, the sum over every rank. TcpRing's reduce-scatter
// runs this schedule and adds in the same order (received into ours), so the two agree bit for
// bit. Every step waits for its send to leave before the next: a block is written only after the
// step that sent it, and each buffer has one operation in flight.
//
// Over `sums`, N blocks of `block` elements of `Element`; add(dst, received, block) adds a
// received block into ours, in the element's arithmetic.
template <typename Element, typename Add>
void ring(::gloo::Context& context, std::span<Element> sums, std::size_t block, std::uint32_t tag,
          Clock::time_point deadline, Add add) {
  const int rank = context.rank;
  const int size = context.size;
  if (size < 2 || block == 0) return;
  const int left = (rank + size - 1) % size;
  const int right = (rank + 1) % size;
  const std::uint64_t slot = ::gloo::Slot::build(kReduceScatterSlotPrefix, tag);
  const std::size_t bytes = block * sizeof(Element);
  std::vector<Element> scratch(block);
  auto from = context.createUnboundBuffer(sums.data(), sums.size_bytes());
  auto into = context.createUnboundBuffer(scratch.data(), bytes);
  const auto at = [&](int k) { return std::size_t((rank - k + 2 * size) % size) * block; };
  for (int k = 1; k < size; ++k) {
    from->send(right, slot, at(k) * sizeof(Element), bytes);  // block r - k
    into->recv(left, slot, 0, bytes);
    wait_recv(*into, deadline, [&] {
      return PeerWaitTimeout("waiting for rank " + std::to_string(left) + " to send block " +
                                 std::to_string(at(k + 1) / block) + " (step " + std::to_string(k) +
                                 " of the reduce-scatter ring)",
                             left);
    });
    add(sums.data() + at(k + 1), scratch.data(), block);  // into block r - k - 1
    wait_send(*from, deadline, [&] {
      return PeerWaitTimeout("waiting for rank " + std::to_string(right) + " to take block " +
                                 std::to_string(at(k) / block) + " (step " + std::to_string(k) +
                                 " of the reduce-scatter ring)",
                             right);
    });
  }
}

}  // namespace

void ring_reduce_scatter(::gloo::Context& context, std::span<float> sums, std::size_t block,
                         std::uint32_t tag, Clock::time_point deadline) {
  ring(context, sums, block, tag, deadline, [](float* dst, const float* received, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) dst[i] += received[i];
  });
}

void ring_reduce_scatter(::gloo::Context& context, HalfType type, std::span<std::uint16_t> sums,
                         std::size_t block, std::uint32_t tag, Clock::time_point deadline) {
  ring(context, sums, block, tag, deadline,
       [type](std::uint16_t* dst, const std::uint16_t* received, std::size_t n) {
         // Ours + received, as the float ring adds, in fp32, rounded back to 16 bits.
         add_halves(type, dst, received, dst, n);
       });
}

}  // namespace gradsync::gloo
