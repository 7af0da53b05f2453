// Forming the ring: each rank listens on an ephemeral port of its bind host, publishes
// "host:port" under "<prefix>/addr/<rank>", connects to rank (r+1) % N and accepts rank
// (r-1) % N. A hello {magic, version, rank, world size, token} goes both ways on each
// connection, so a rank that dialled the wrong address, or one of another world size, is
// refused with a PeerError instead of corrupting a collective later. The token is the ring's,
// drawn by rank 0 and read from the Store by the others: a connection to a listener that does
// not present it (a port scanner, a rank of another run) is a stray, refused with one line on
// stderr and closed, and the listener goes on waiting for its neighbour; no rank is blamed.
//
// Blocks until both links are up or `deadline` passes; a TimeoutError names the neighbour that
// did not show up. Ring bandwidth needs TCP_NODELAY and large socket buffers, set here before
// connect / listen so that the TCP window can scale to them from the first segment.
#pragma once

#include <string>

#include "allreduce/store.h"
#include "allreduce/tcp/socket.h"
#include "allreduce/tcp/tcp_ring_options.h"

namespace gradsync::tcp {

inline constexpr int kRingSocketBufferBytes = 4 << 20;

struct RingLinks {
  Socket left;   // receive side: rank (r-1) % N connected to us
  Socket right;  // send side: we connected to rank (r+1) % N
  std::string left_endpoint;
  std::string right_endpoint;
};

RingLinks connect_ring(Store& store, int rank, int size, const TcpRingOptions& options,
                       Clock::time_point deadline);

}  // namespace gradsync::tcp
