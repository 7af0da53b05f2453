// The MPI library, once per process: what every MpiCommunicator (and the MPI test) shares.
//
//   const mpi::World world = mpi::init_mpi_once();   // MPI_Init_thread the first time
//   { auto held = mpi::lock(); MPI_Test(...); }     // every MPI call holds the lock
//
// Threading: MPI is initialised at MPI_THREAD_SERIALIZED, and gradsync keeps that promise itself:
// every MPI call it makes holds mpi::lock(). In practice the calls come from the communicators'
// background threads (one collective at a time each) and, rarely, from a caller's thread
// (MPI_Abort in abort(), MPI_Comm_free in a destructor); the lock is held only for calls that
// return at once (MPI_Test and the non-blocking MPI_I* starts), never across a wait, so MPI_Abort
// is never held up. SERIALIZED is what Open MPI 4.1 gives for the asking (it offers MULTIPLE too);
// an MPI that gives less is refused with one line.
//
// Finalising: the first init_mpi_once() registers MPI_Finalize with atexit, so a normal exit
// (main returns, or std::exit) finalises and mpirun sees no "exited without calling finalize".
// Every communicator must be destroyed before then; an MPI call after finalising throws.
// MPI_Finalize waits for every rank to finalise, so a rank that fails alone should end the job
// through MpiCommunicator::abort (MPI_Abort) rather than by returning.
//
// Compiled only with MPI (GRADSYNC_HAVE_MPI); only allreduce/mpi/ and its test include it.
#pragma once

#include <mutex>
#include <string>

namespace gradsync::mpi {

struct World {
  int rank = 0;  // in MPI_COMM_WORLD
  int size = 1;
};

// Initialises MPI on the first call (from any thread; later calls return the same World).
// Throws Error when MPI cannot start or offers less than MPI_THREAD_SERIALIZED, and after MPI
// was finalised.
World init_mpi_once();

// Held around every MPI call gradsync makes (see above). Throws Error once MPI is finalised.
std::unique_lock<std::mutex> lock();

// MPI's own words for an error code ("MPI_ERR_TRUNCATE: message truncated").
std::string error_text(int code);

// Throws Error("<what>: <MPI's words>") unless code is MPI_SUCCESS.
void check(int code, const std::string& what);

// The library's first line of MPI_Get_library_version, e.g. "Open MPI v4.1.4, package: ...".
std::string library_version();

}  // namespace gradsync::mpi
