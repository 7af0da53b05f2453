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
// did not show up. Ring bandwidth needs TCP_NODELAY and a large receive buffer, set here before
// connect / listen so that the TCP window can scale to it from the first segment.
#pragma once

#include <string>

#include "allreduce/store.h"
#include "allreduce/tcp/socket.h"
#include "allreduce/tcp/tcp_ring_options.h"

namespace gradsync::tcp {

// A large receive buffer, so that a pipeline of chunks fits in flight; a small send buffer, so
// that each send() hands the kernel little at a time and the pipeline turns back to its receive
// side often, reading the peer's bytes while they are still in cache. Measured with `gradsync
// bench allreduce --backend tcp --ranks-as processes` on a 2-core Zen 4 VM, three alternated
// rounds: a 256 KiB send buffer against 4 MiB took N = 2 from 2.2-2.5 to 4.3-4.8 GB/s at
// 64 MiB, 4.2-5.5 to 6.0-7.5 at 4 MiB, and N = 4 from 0.9 to 1.45-1.6 at 64 MiB. Send buffers
// of 64 KiB to 1 MiB ran 0.6-1.05x of 256 KiB (512 KiB about level with it), and the receive
// buffer's size (1 MiB, 4 MiB, autotuned) made no difference once the send buffer was small.
inline constexpr SocketBuffers kRingSocketBuffers{.send_bytes = 256 << 10,
                                                  .receive_bytes = 4 << 20};

struct RingLinks {
  Socket left;   // receive side: rank (r-1) % N connected to us
  Socket right;  // send side: we connected to rank (r+1) % N
  std::string left_endpoint;
  std::string right_endpoint;
};

RingLinks connect_ring(Store& store, int rank, int size, const TcpRingOptions& options,
                       Clock::time_point deadline);

}  // namespace gradsync::tcp
