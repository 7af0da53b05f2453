// The Gloo communicator's reduce-scatter: the first half of a ring allreduce, written over Gloo's
// tagged unbound buffers, rather than Gloo's ReduceScatterHalvingDoubling (in Debian's
// gloo/reduce_scatter.h), which finds its peers' messages by the context's slot counter, so that
// ranks that disagree on the size end the process (an assertion on Gloo's event-loop thread,
// tried with this Gloo), and whose last phase writes the result over the start of its buffer
// without waiting for earlier sends from there to leave.
//
//   std::vector<float> sums(in.begin(), in.end());     // the ring adds into the blocks it sends
//   ring_reduce_scatter(context, sums, block, tag, Clock::now() + timeout);
//   // sums[rank * block, (rank + 1) * block) is now the sum over every rank of that block
//
// Its schedule and order of additions are TcpRing's reduce-scatter, so the two give the same
// bits. Each rank sends and receives (N-1)/N of the input. Blocks until done; every wait is
// bounded by `deadline` (gloo_waits.h): a ring that stalls throws PeerWaitTimeout naming the
// neighbour it waited for, by the deadline. Internal to allreduce/gloo/ (it includes Gloo's
// headers).
#pragma once

#include <gloo/context.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "allreduce/communicator.h"
#include "allreduce/gloo/gloo_waits.h"

namespace gradsync::gloo {

// Over the N = context.size blocks of `block` floats in `sums`, in place, on slots derived from
// `tag` (the same on every rank that issues the same collective). With one rank, nothing to do.
void ring_reduce_scatter(::gloo::Context& context, std::span<float> sums, std::size_t block,
                         std::uint32_t tag, Clock::time_point deadline);

// The same ring over 16-bit floats of `type` (reduce_scatter_half), 2 bytes an element on the
// wire: each addition in fp32, rounded back to 16 bits (allreduce/half_sum.h), in TcpRing's
// order, so the two give the same bits here too.
void ring_reduce_scatter(::gloo::Context& context, HalfType type, std::span<std::uint16_t> sums,
                         std::size_t block, std::uint32_t tag, Clock::time_point deadline);

}  // namespace gradsync::gloo
