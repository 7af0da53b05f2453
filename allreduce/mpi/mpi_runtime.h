// The MPI library, once per process: what every MpiCommunicator (and the MPI test) shares.
//
//   const mpi::World world = mpi::init_mpi_once();   // MPI_Init_thread the first time
//   if (mpi::thread_multiple()) MPI_Allreduce(...);  // blocking, no lock: MULTIPLE allows it
//   { auto held = mpi::lock(); MPI_Test(...); }     // every other MPI call holds the lock
//
// Threading: MPI is initialised asking for MPI_THREAD_MULTIPLE, and accepts
// MPI_THREAD_SERIALIZED at least. Under MULTIPLE (what Open MPI 4.1 gives), each communicator's
// background thread runs its collectives as blocking MPI calls (MPI_Allreduce, served by Open
// MPI's fast `tuned` component, where the non-blocking MPI_Iallreduce is served by the slower
// libnbc) without the lock: MULTIPLE needs no serialisation, and a call that waits for other
// ranks must not hold a lock that MPI_Abort needs. Under SERIALIZED alone, gradsync keeps the
// promise itself: the collectives are non-blocking calls polled with MPI_Test, and every MPI
// call holds mpi::lock(). Either way, every other MPI call gradsync makes holds the lock too (the
// polled MPI_Comm_idup that makes a communicator, MPI_Comm_free in a destructor, MPI_Abort in
// abort() and at a timeout), and once MPI runs the lock is held only for calls that return at
// once, never across a wait for other ranks, so MPI_Abort is never held up. The two exceptions
// bracket the communicators' lives: MPI_Init_thread (which may wait for the launcher) runs under
// the lock before any communicator exists, and MPI_Finalize (which waits for every rank to
// finalise) runs under it at exit, after they are gone; an MPI call that arrives meanwhile waits
// for it, then throws. An MPI that gives less than SERIALIZED is refused with one line, as is an
// MPI that this process's own code started (MPI_Init before the first communicator) below it;
// one started at SERIALIZED gets the polled path.
//
// Oversubscribed hosts: Open MPI's blocking calls spin while they wait. Where mpirun left the
// ranks unbound (--bind-to none) and this host runs more of them than the cores they may use,
// MPI is started with OMPI_MCA_mpi_yield_when_idle=1 (unless the environment already chooses),
// as mpirun itself does when it counts the host oversubscribed: otherwise a waiting rank spins on
// the core its peer needs (mpi_runtime.cpp says why mpirun's own count can miss it).
//
// Finalising: the MPI standard wants MPI_Finalize on the thread that initialised MPI (its "main
// thread"). The first init_mpi_once() therefore must come from the process's main thread (it
// refuses any other), and registers MPI_Finalize with atexit: a normal exit (main returns, or
// std::exit on the main thread) finalises there, and mpirun sees no "exited without calling
// finalize". (std::exit on another thread would finalise on that one; Open MPI tolerates it, the
// standard does not promise it: return from main instead.) Where MPI was started before the first
// init_mpi_once(), its starter finalises it and gradsync registers nothing. Every communicator
// must be destroyed before then; an MPI call after finalising throws. MPI_Finalize waits for
// every rank to finalise, so a rank that fails alone should end the job through
// MpiCommunicator::abort (MPI_Abort) rather than by returning.
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

// Initialises MPI on the first call, which must come from the main thread (the one that will
// finalise MPI at exit, see above); later calls, from any thread, return the same World. Throws
// Error when called first elsewhere, when MPI cannot start or offers less than
// MPI_THREAD_SERIALIZED (also where something else started it), and after MPI was finalised.
World init_mpi_once();

// True when MPI gave MPI_THREAD_MULTIPLE: the communicators' collectives are then blocking MPI
// calls made without the lock (see above). False before MPI starts.
bool thread_multiple();

// Held around every MPI call gradsync makes but the blocking collectives under MULTIPLE (see
// above). Throws Error once MPI is finalised.
std::unique_lock<std::mutex> lock();

// MPI's own words for an error code ("MPI_ERR_TRUNCATE: message truncated").
std::string error_text(int code);

// Throws Error("<what>: <MPI's words>") unless code is MPI_SUCCESS.
void check(int code, const std::string& what);

// The library's first line of MPI_Get_library_version, e.g. "Open MPI v4.1.4, package: ...".
std::string library_version();

}  // namespace gradsync::mpi
