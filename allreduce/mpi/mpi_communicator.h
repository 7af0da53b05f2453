// MpiCommunicator: the Communicator of allreduce/communicator.h over MPI (Debian's Open MPI), on
// host buffers, beside TcpRing and Gloo: the same contract, MPI's collectives underneath.
//
//   MpiOptions options;  options.timeout = comm_timeout;
//   auto comm = make_mpi_communicator(store, rank, world, options);   // collective
//   comm->allreduce(grads, ReduceOp::kAvg);
//
// Launch: every rank is a process of one MPI job (mpirun -np N, or srun --mpi=pmix); the rank
// and size given must be MPI_COMM_WORLD's, and a mismatch is refused with one line. MPI starts
// once per process (mpi_runtime.h: MPI_THREAD_MULTIPLE asked for, SERIALIZED at least,
// MPI_Finalize at exit). The communicator works on its own duplicate of MPI_COMM_WORLD, with
// MPI_ERRORS_RETURN, so its messages never meet anyone else's and MPI's errors become gradsync
// errors.
//
// Collectives: allreduce is MPI_Allreduce (MPI_SUM, MPI_IN_PLACE), broadcast MPI_Bcast, allgather
// MPI_Allgather (MPI_IN_PLACE when `in` is this rank's block of `out`), reduce_scatter
// MPI_Reduce_scatter_block, barrier MPI_Barrier, allreduce_half MPI_Allreduce and
// reduce_scatter_half MPI_Reduce_scatter_block, both of MPI_UINT16_T with a user MPI_Op per format
// (each addition in fp32, rounded to 16 bits): the blocking calls, which Open MPI serves from its
// `tuned` component, as a program calling MPI_Allreduce gets. Only where MPI gives less than
// MPI_THREAD_MULTIPLE (an MPI started by the program at SERIALIZED) are they the non-blocking
// MPI_Iallreduce, MPI_Ibcast, MPI_Iallgather, MPI_Ireduce_scatter_block and MPI_Ibarrier, which
// Open MPI serves from libnbc, with other algorithms (up to 2x slower; `mpi_allreduce_plain
// --nonblocking` measures libnbc alone, docs/benchmarks.md). MPI chooses the algorithm by size and
// ranks. ReduceOp::kAvg is the sum, then each element divided by float(size) on every rank, as
// TcpRing and Gloo divide. MPI leaves the summation order to the library: integer-valued sums are
// exact, and for other data every rank ends with the same bits under Open MPI's algorithms, which
// may differ from TcpRing's (or, for reduce_scatter, from the matching block of MPI's allreduce) in
// the last bits.
//
// Threads: make_mpi_communicator blocks until every rank has joined (through the Store, then
// MPI_Comm_idup). The *_async calls only queue the collective and may come from any thread (issue
// order is execution order, the same on every rank); one background thread per communicator
// runs them. Under MPI_THREAD_MULTIPLE it makes each collective's blocking MPI call itself,
// holding no lock, and a second thread per communicator, its watchdog, keeps the deadline and
// publishes progress while that call runs (mpi_runner.h). Under SERIALIZED alone it starts the
// non-blocking call and polls MPI_Test (Open MPI progresses non-blocking collectives only inside
// MPI calls), watching the deadline between tests. Either way, while a collective moves data or
// waits for a late rank the background thread keeps a core busy (Open MPI's blocking calls spin
// in its progress loop; the polling spins while data moves, then sleeps: mpi_polling.cpp). With
// more ranks on a host than it has cores, MPI's progress loop yields the core when it finds
// nothing to do (mpi_runtime.h), as Open MPI does when mpirun knows it oversubscribes the host.
// Buffers must stay valid and untouched until the Work completes. World size 1 is a no-op that
// completes as soon as the collectives queued before it have; zero elements move no payload but
// still exchange the desync header with the others.
//
// Mismatched collectives (another operation, size, root or sequence on some rank): with
// options.check_desync (the default) every collective, zero elements included, starts with an
// allgather (MPI_Allgather; MPI_Iallgather where polled) of a 32-byte header (operation, count,
// root, sequence) from every rank, and headers that differ fail the collective on every rank
// with a desync error (PeerError): the header most ranks sent is the job's collective, and the
// ranks that sent another are named with theirs (with no majority, as at 2 ranks, every side is
// named); as after any failure, every later call throws it again. Cost: one small
// latency-bound allgather per collective, N x 32 bytes, not counted as payload (over Open MPI's
// TCP transport, which `gradsync run` and the bench use, a round trip or two on loopback).
// Without it, a mismatch is MPI's undefined behaviour (an MPI_ERR_TRUNCATE error, a hang until
// the timeout, or wrong sums).
//
// Timeouts: MPI cannot time a collective out or cancel one, and its buffers may be written until
// it completes, so a collective that has not finished `options.timeout` after it started ends
// the whole job. The watchdog (blocking calls) or the polling thread notices; that rank
// publishes its progress (mpi_reports.h), reads the others' for a grace period (min(timeout,
// 2 s)), writes one line to stderr naming the rank(s) that never reached the collective
// ("gradsync: error: rank 3 (host) during collective #7 allreduce of 1000 floats (mpi): rank 0
// timed out after 60000 ms waiting for rank 3, which never reached it; last started/finished:
// rank 0 7/6, ..., rank 3 no report (mpi: MPI_Abort ends every rank)") and calls MPI_Abort,
// which makes mpirun end every rank. The same happens when the communicator is destroyed with a
// collective in flight (its first MPI call made); collectives still queued then fail with "the
// communicator was destroyed" and the job goes on. abort(reason) writes the reason to stderr and
// the Store ("<prefix>/aborted/<rank>"), then MPI_Abort: the job ends at once, none of its ranks
// waits for a timeout. (The one place where gradsync's library code ends the process:
// docs/errors.md.) After any other failure every later call throws the same error, as with the
// other backends.
//
// Without MPI in the build (GRADSYNC_HAVE_MPI undefined) only mpi_compiled_in() may be called.
#pragma once

#include <memory>
#include <string>

#include "allreduce/communicator.h"
#include "allreduce/mpi/mpi_options.h"
#include "allreduce/store.h"

namespace gradsync {

// Collective over the `size` ranks of the MPI job: each calls it with its own rank (that of
// MPI_COMM_WORLD). Blocks until every rank has joined (bounded by options.timeout: the Store's
// TimeoutError names who is missing). The Store must outlive the communicator.
std::unique_ptr<Communicator> make_mpi_communicator(Store& store, int rank, int size,
                                                    const MpiOptions& options);

// "Open MPI v4.1.4" (MPI_Get_library_version's first words; callable before MPI starts).
std::string mpi_library_version();

// True when this build has MPI (CMake found it and defined GRADSYNC_HAVE_MPI for every target
// above allreduce/).
constexpr bool mpi_compiled_in() {
#ifdef GRADSYNC_HAVE_MPI
  return true;
#else
  return false;
#endif
}

}  // namespace gradsync
