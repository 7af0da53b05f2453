// GlooCommunicator: the Communicator of allreduce/communicator.h over Gloo (Debian's
// libgloo-dev), on host buffers, beside TcpRing: the same contract, Gloo's algorithms and TCP
// transport underneath.
//
//   GlooOptions options;  options.timeout = comm_timeout;  options.algorithm = "halving_doubling";
//   auto comm = make_gloo_communicator(store, rank, world, options);   // collective
//   comm->allreduce(grads, ReduceOp::kAvg);
//
// Rendezvous: through the gradsync Store (allreduce/store.h), under "<store_prefix>/": each rank
// publishes the addresses of its Gloo TCP pairs there (allreduce/gloo/gloo_store.h) and every
// pair of ranks connects (Gloo's full mesh, allreduce/gloo/gloo_mesh.h); then the local address
// of each connection, under "<store_prefix>/addresses/<rank>", so that a peer's error can name a
// rank where Gloo's message gives only an address. Joining waits for every rank up to
// options.timeout; a rank that never comes is the Store's TimeoutError naming the keys still
// missing.
//
// Algorithms (allreduce; options.algorithm, gloo_algorithms() lists them):
//   ring              gloo::allreduce, RING: reduce-scatter then all-gather, segments pipelined
//                     (each rank sends and receives 2(N-1)/N of the buffer)
//   ring_chunked      gloo::AllreduceRingChunked: the ring over 2N chunks, two in flight
//   halving_doubling  gloo::AllreduceHalvingDoubling: recursive halving then doubling (log2 N
//                     steps; other sizes in binary blocks)
// Pairs (options.pairs; gloo_pair_modes() lists them): async, Gloo's default, runs everything on
// pairs whose sockets Gloo's event-loop thread reads, handing each message to the waiting
// thread; sync and busy_poll run the float allreduce (halving_doubling only) on a second mesh
// of pairs in Gloo's sync mode, where the thread running it reads its own sockets (busy_poll:
// spinning, without sleeping in recv), in pieces of at most
// GlooMesh::sync_message_floats() (gloo_mesh.h says why); every other collective stays on the
// async pairs. On a 2-core VM with 2 ranks a 1 MiB halving_doubling took 0.25-0.45 ms on sync
// pairs against 1.1-2.0 ms for the async ring (allreduce/README.md has the figures).
// allreduce_half is gloo::allreduce's RING on 2-byte elements with a reduce function of ours
// (allreduce/half_sum.h), whatever options.algorithm says (gloo_algorithms.h says why).
// Broadcast is gloo::broadcast (a binomial tree from the root), allgather gloo::allgather (ring),
// barrier gloo::barrier, each call with its own tag (see "Mismatched collectives" below).
// Reduce-scatter is the reduce-scatter half of a ring, written here over Gloo's tagged unbound
// buffers ((N-1)/N of the input each way, whatever options.algorithm says; why not Gloo's own:
// allreduce/gloo/gloo_ring_reduce_scatter.h). Its schedule and order of additions are TcpRing's
// reduce-scatter, so the two give the same bits; against this allreduce's blocks, only exact sums
// are sure to agree. reduce_scatter_half is that ring over 16-bit values, each addition rounded
// back to 16 bits (allreduce/half_sum.h), as TcpRing's reduce_scatter_half rounds them.
// ReduceOp::kAvg is the sum, then each element divided by float(size) on every rank, as TcpRing
// divides each finished segment: where both sum in the same order the bits agree; for N >= 3
// Gloo's orders differ from TcpRing's, so non-integer data can differ in the last bits (integer
// sums are exact either way). Every rank ends with the same bits under every algorithm.
//
// Threads: make_gloo_communicator blocks until every rank has joined. The *_async calls only
// queue the collective and may come from any thread (issue order is execution order, the same on
// every rank); one background thread per communicator runs them through Gloo, whose own TCP
// device adds an event-loop thread. Buffers must stay valid and untouched until the Work
// completes. World size 1 and zero elements are no-ops that complete as soon as the collectives
// queued before them have (zero elements on several ranks still take part in the desync check).
//
// Failures: a collective has options.timeout from its start: each wait of the header check and
// of the reduce-scatter ring gets what is left of it, so that they fail by the deadline. Gloo's
// ring, broadcast, allgather and barrier get what is left when their payload starts, which Gloo
// gives each of its waits (one that progresses slowly can outlast the deadline), ring_chunked and
// halving_doubling the whole timeout for each wait; on sync pairs the header round's and
// halving_doubling's reads and writes get what is left of the deadline (the header round before
// each read, the payload when it starts: GlooMesh::limit_sync_waits); none waits forever.
// Gloo's exceptions become gradsync errors naming the collective (its sequence number, operation
// and size) and, where a wait of ours or Gloo's message says it, the peer's rank and address: a
// timeout is a TimeoutError; a closed or reset connection is a PeerError, or a TimeoutError when
// that peer reported (through the Store) that it had timed out first. A rank whose collective fails
// publishes why under "<store_prefix>/failed/<rank>" and closes its connections, so that its peers
// fail at once and can say why (allreduce/gloo/gloo_failures.h). After a failure, every later call
// throws the same error. abort(reason) publishes `reason` the same way, closes this rank's
// connections (its peers' blocked collectives fail at once, naming it), and fails what runs or is
// queued here and every later call with "this rank aborted: <reason>"; it never waits on a peer.
// The destructor closes the connections, fails what is queued and joins the thread: it never hangs.
//
// Mismatched collectives (another operation, size, root or sequence on some rank) fail every rank
// with a desync PeerError before any payload moves, as TcpRing's do: with more than one rank,
// every collective, zero elements included, starts with each rank sending every other a 32-byte
// header (options.check_desync; allreduce/gloo/gloo_header_check.h), and each rank compares the N
// it holds: "desync: rank 1 is in collective #7 allreduce of 6 floats but ranks 0, 2 are in
// collective #7 allreduce of 5 floats" (the headers most ranks hold last). That costs one round of
// small messages per collective. Without the check, every collective of the ring, broadcast,
// allgather, reduce-scatter and barrier still has a Gloo tag hashed from its sequence number and
// shape, so mismatched ranks never exchange bytes: each times out; but ring_chunked and
// halving_doubling find their peers' messages by Gloo's slot counter alone, and there a size
// mismatch fails an assertion on Gloo's event-loop thread, which ends the process
// (std::terminate).
//
// Gloo's own headers stay out of this one: only the other files of allreduce/gloo/ see them, so
// no target above needs Gloo's include path. Without Gloo in the build (GRADSYNC_HAVE_GLOO
// undefined) only gloo_compiled_in() may be called.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "allreduce/communicator.h"
#include "allreduce/gloo/gloo_options.h"
#include "allreduce/store.h"

namespace gradsync {

// Collective over `size` ranks: each calls it with its own rank. Blocks until every rank has joined
// (bounded by options.timeout). An unknown options.algorithm is a ConfigError for comm.algorithm;
// an unknown options.pairs, or sync pairs with another algorithm than halving_doubling, one for
// comm.gloo_pairs. The Store must outlive the communicator (failure reports go through it).
std::unique_ptr<Communicator> make_gloo_communicator(Store& store, int rank, int size,
                                                     const GlooOptions& options);

// The values GlooOptions::algorithm accepts, in order: ring, ring_chunked, halving_doubling.
const std::vector<std::string>& gloo_algorithms();
// The values GlooOptions::pairs accepts: async, sync, busy_poll.
const std::vector<std::string>& gloo_pair_modes();

// Gloo's version as the headers this build was compiled against state it, e.g. "0.5.0" (Debian
// packages a git snapshot, which carries no finer version).
std::string gloo_version();

// True when this build has Gloo (CMake found libgloo-dev and defined GRADSYNC_HAVE_GLOO for
// every target above allreduce/).
constexpr bool gloo_compiled_in() {
#ifdef GRADSYNC_HAVE_GLOO
  return true;
#else
  return false;
#endif
}

}  // namespace gradsync
