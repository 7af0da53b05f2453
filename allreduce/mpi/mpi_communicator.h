// MpiCommunicator: the Communicator of allreduce/communicator.h over MPI (Debian's Open MPI), on
// host buffers, beside TcpRing and Gloo: the same contract, MPI's collectives underneath.
//
//   MpiOptions options;  options.timeout = comm_timeout;
//   auto comm = make_mpi_communicator(store, rank, world, options);   // collective
//   comm->allreduce(grads, ReduceOp::kAvg);
//
// Launch: every rank is a process of one MPI job (mpirun -np N, or srun --mpi=pmix); the rank
// and size given must be MPI_COMM_WORLD's, and a mismatch is refused with one line. MPI starts
// once per process (mpi_runtime.h: MPI_THREAD_SERIALIZED, MPI_Finalize at exit). The
// communicator works on its own duplicate of MPI_COMM_WORLD, with MPI_ERRORS_RETURN, so its
// messages never meet anyone else's and MPI's errors become gradsync errors.
//
// Collectives: allreduce is MPI_Iallreduce (MPI_SUM in place), broadcast MPI_Ibcast, allgather
// MPI_Iallgather, reduce_scatter MPI_Ireduce_scatter_block, barrier MPI_Ibarrier; MPI chooses
// the algorithm (Open MPI's libnbc, by size and ranks; its non-blocking allreduce can be slower
// than the blocking one: at 2 ranks and 4 MB about 2x on a 2-core VM, where
// `--mca coll_libnbc_iallreduce_algorithm 1` (ring) closes the gap). ReduceOp::kAvg is the
// sum, then each element divided by float(size) on every rank, as TcpRing and Gloo divide. MPI
// leaves the summation order to the library: integer-valued sums are exact, and for other data
// every rank ends with the same bits under Open MPI's algorithms, which may differ from TcpRing's
// (or, for reduce_scatter, from the matching block of MPI's allreduce) in the last bits.
//
// Threads: make_mpi_communicator blocks until every rank has joined (through the Store, then
// MPI_Comm_idup). The *_async calls only queue the collective and may come from any thread (issue
// order is execution order, the same on every rank); one background thread per communicator
// starts each collective with a non-blocking MPI call and polls MPI_Test (Open MPI progresses
// non-blocking collectives only inside MPI calls), so that it can watch the deadline. Buffers must
// stay valid and untouched until the Work completes. World size 1 and zero elements are no-ops
// that complete as soon as the collectives queued before them have.
//
// Mismatched collectives (another operation, size, root or sequence on some rank): with
// options.check_desync (the default) every collective starts with an MPI_Iallgather of a 32-byte
// header (operation, count, root, sequence) from every rank, and a rank whose header differs
// fails the collective on every rank with a desync error (PeerError) naming both ranks and both
// collectives; as after any failure, every later call throws it again. Cost: one small
// latency-bound allgather per collective, N x 32 bytes, not counted as payload (over shared
// memory at 2 and 4 ranks it is lost in the noise of the ~20 us the hand-off to the background
// thread takes). Without it, a mismatch is MPI's undefined behaviour (an MPI_ERR_TRUNCATE
// error, a hang until the timeout, or wrong sums).
//
// Timeouts: MPI cannot time a collective out or cancel one, and its buffers may be written until
// it completes, so a collective that has not finished `options.timeout` after it started ends
// the whole job. That rank publishes its progress (mpi_reports.h), reads the others' for a grace
// period (min(timeout, 2 s)), writes one line to stderr naming the rank(s) that never reached the
// collective ("gradsync: error: rank 3 (host) during collective #7 allreduce sum of 1000 floats
// (mpi): rank 0 timed out after 60000 ms waiting for rank 3, which never reached it; last
// started/finished: rank 0 7/6, ..., rank 3 no report (mpi: MPI_Abort ends every rank)") and
// calls MPI_Abort, which makes mpirun end every rank. The
// same happens when the communicator is destroyed with a collective still running. abort(reason)
// writes the reason to stderr and the Store ("<prefix>/aborted/<rank>"), then MPI_Abort: the
// job ends at once, none of its ranks waits for a timeout. (The one place where gradsync's
// library code ends the process: docs/errors.md.) After any other failure every later call
// throws the same error, as with the other backends.
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
