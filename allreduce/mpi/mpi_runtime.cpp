#include "allreduce/mpi/mpi_runtime.h"

#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "common/error.h"

namespace gradsync::mpi {
namespace {

// One per process, like MPI itself: initialised, finalised, and the lock around every call.
struct State {
  std::mutex mutex;
  bool initialised = false;
  bool finalised = false;
  // MPI_THREAD_MULTIPLE provided: set before `initialised`, read without the mutex (a thread
  // may ask while another holds it across MPI_Init_thread or MPI_Finalize).
  std::atomic<bool> multiple{false};
  World world;
};

State& state() {
  static State* s = new State;  // never destroyed: atexit's finalize may run after statics go
  return *s;
}

void finalize_at_exit() {
  State& s = state();
  std::lock_guard held(s.mutex);
  if (s.finalised) return;
  s.finalised = true;
  int already = 0;
  MPI_Finalized(&already);
  if (!already) MPI_Finalize();
}

// Open MPI's blocking calls spin in its progress loop while they wait; when this host runs more
// of the job's ranks than the cores they may use, a spinning rank holds the core that the peer
// it waits for needs, and every collective crawls (4 ranks on 2 cores over TCP: 1 MiB allreduces
// at 0.04 GB/s busbw, 0.5-1.1 with the yield). Open MPI yields the core in that loop when mpirun reckons
// the host oversubscribed, but mpirun counts slots, not cores, and `--host localhost:N`
// (launch/mpirun_command.h) declares N of them. So where mpirun left its ranks unbound
// (--bind-to none: each may run on every core this one may), the count is made again here,
// against those cores, and the yield asked for through its MCA variable, which MPI_Init reads;
// never over a choice already in the environment. (Bound ranks were placed by mpirun, which
// does not put two on one core unless told to.) setenv is safe only while no other thread reads
// the environment: this runs once, on the main thread, before the first communicator's threads.
void yield_when_oversubscribed() {
  if (std::getenv("OMPI_MCA_mpi_yield_when_idle") != nullptr) return;
  const char* binding = std::getenv("OMPI_MCA_hwloc_base_binding_policy");
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");  // ranks on this host
  if (binding == nullptr || std::string(binding) != "none" || local == nullptr) return;
  cpu_set_t cores;
  CPU_ZERO(&cores);
  if (::sched_getaffinity(0, sizeof cores, &cores) != 0) return;
  if (std::atoi(local) > CPU_COUNT(&cores)) ::setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
}

}  // namespace

World init_mpi_once() {
  State& s = state();
  std::lock_guard held(s.mutex);
  if (s.finalised) throw Error("mpi: MPI was finalised already; it cannot start again");
  if (s.initialised) return s.world;
  int started = 0;
  MPI_Initialized(&started);
  if (started) {
    // Someone else's MPI_Init (the program's own, or a library's): it finalises, not us, but
    // the communicators' background threads still need SERIALIZED, and run blocking calls
    // only where it gave MULTIPLE.
    int provided = MPI_THREAD_SINGLE;
    check(MPI_Query_thread(&provided), "MPI_Query_thread");
    if (provided < MPI_THREAD_SERIALIZED) {
      throw Error(
          "mpi: MPI was started in this process (before gradsync's first communicator) at "
          "thread level " +
          std::to_string(provided) + ", below MPI_THREAD_SERIALIZED (" +
          std::to_string(MPI_THREAD_SERIALIZED) +
          "), which the communicator's background thread needs: start it with "
          "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)");
    }
    s.multiple = provided >= MPI_THREAD_MULTIPLE;
  } else {
    // MPI_Finalize runs at exit, on the thread that calls exit: the main thread, when main
    // returns. The standard wants it on the thread that initialised MPI, so start it there.
    if (::gettid() != ::getpid()) {
      throw Error(
          "mpi: MPI must start on the process's main thread, which finalises it at exit: "
          "make the first mpi communicator there");
    }
    yield_when_oversubscribed();
    int provided = MPI_THREAD_SINGLE;
    // Errors while starting (no mpirun where one is needed, a broken install) are MPI's own
    // fatal ones: it prints why and ends the process, as nothing else could run without it.
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_SERIALIZED) {
      MPI_Finalize();
      s.finalised = true;
      throw Error("mpi: " + library_version() + " offers thread level " + std::to_string(provided) +
                  ", below MPI_THREAD_SERIALIZED (" + std::to_string(MPI_THREAD_SERIALIZED) +
                  "), which the communicator's background thread needs");
    }
    s.multiple = provided >= MPI_THREAD_MULTIPLE;
    std::atexit(finalize_at_exit);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &s.world.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &s.world.size);
  s.initialised = true;
  return s.world;
}

bool thread_multiple() { return state().multiple; }

std::unique_lock<std::mutex> lock() {
  State& s = state();
  std::unique_lock held(s.mutex);
  if (s.finalised) throw Error("mpi: an MPI call after MPI_Finalize (at exit)");
  return held;
}

std::string error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "error " + std::to_string(code);
  return std::string(text, std::size_t(length));
}

void check(int code, const std::string& what) {
  if (code != MPI_SUCCESS) throw Error(what + ": " + error_text(code));
}

std::string library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(text, &length);
  const std::string all(text, std::size_t(length));
  return all.substr(0, all.find_first_of("\n,"));
}

}  // namespace gradsync::mpi
