// TcpRing: the CPU Communicator. Ranks form a ring over TCP (rank r sends to r+1 and receives
// from r-1, modulo N), found through a Store. Allreduce is reduce-scatter then all-gather
// around the ring: each rank sends and receives 2(N-1)/N of the buffer, the bandwidth-optimal
// schedule (Patarasuk & Yuan 2009; baidu-allreduce). Buffers of any length work: the first
// length % N segments take one extra element. Each segment moves in chunks so that sending
// chunk c+1 overlaps reducing chunk c, and large buffers stream at link speed. Reduce-scatter
// is the first half alone (N-1 steps, (N-1)/N of the input each way), on a copy of the input,
// turned by one segment so that rank r finishes block r. Its blocks therefore add up around the
// ring in another order than the allreduce's segments: for N >= 3, non-integer sums may differ
// from the allreduce's in the last bits (exact sums agree, and kAvg divides the same way).
// allreduce_half and reduce_scatter_half are the allreduce's and the reduce-scatter's rings on
// 16-bit elements (2 bytes each on the wire), each addition rounded back to 16 bits
// (allreduce/half_sum.h).
//
// Every message carries (collective sequence number, operation, element count); a receiver
// that sees anything but what it expects fails with a desync error naming both ranks and both
// collectives. A collective that waits past `timeout` fails on every live rank: each rank
// then publishes its last started / finished sequence numbers through the Store and waits a
// short grace period for the others', so the message names the rank waited for and what every
// rank (or "no report") was doing. A rank whose peer dies (connection reset / EOF) fails at
// once with a PeerError naming that peer.
//
// Threads: make_tcp_ring blocks until the ring is formed. The *_async calls only queue the
// collective and may come from any thread (the issue order is the execution order, and must be
// the same on every rank); one background thread per communicator moves the data, sending and
// receiving at once on non-blocking sockets. Destroying the communicator shuts its sockets down,
// fails whatever is running or queued, and joins that thread: it never hangs.
#pragma once

#include <memory>

#include "allreduce/communicator.h"
#include "allreduce/store.h"
#include "allreduce/tcp/tcp_ring_options.h"

namespace gradsync {

// Connects the ring: publishes this rank's address in `store`, connects to the next rank and
// accepts the previous one. Blocks until the ring is formed or `options.timeout` passes. The
// Store must outlive the call; the communicator keeps a reference for failure reports, so it
// must outlive the communicator too.
std::unique_ptr<Communicator> make_tcp_ring(Store& store, int rank, int size,
                                            const TcpRingOptions& options);

}  // namespace gradsync
