#include "allreduce/mpi/mpi_runtime.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdlib>

#include "common/error.h"

namespace gradsync::mpi {
namespace {

// One per process, like MPI itself: initialised, finalised, and the lock around every call.
struct State {
  std::mutex mutex;
  bool initialised = false;
  bool finalised = false;
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
    // the communicators' background threads still need SERIALIZED.
    int provided = MPI_THREAD_SINGLE;
    check(MPI_Query_thread(&provided), "MPI_Query_thread");
    if (provided < MPI_THREAD_SERIALIZED) {
      throw Error(
          "mpi: MPI was started in this process (before gradsync's first communicator) at "
          "thread level " +
          std::to_string(provided) + ", below MPI_THREAD_SERIALIZED (" +
          std::to_string(MPI_THREAD_SERIALIZED) +
          "), which the communicator's background thread needs: start it with "
          "MPI_Init_thread(..., MPI_THREAD_SERIALIZED, ...)");
    }
  } else {
    // MPI_Finalize runs at exit, on the thread that calls exit: the main thread, when main
    // returns. The standard wants it on the thread that initialised MPI, so start it there.
    if (::gettid() != ::getpid()) {
      throw Error(
          "mpi: MPI must start on the process's main thread, which finalises it at exit: "
          "make the first mpi communicator there");
    }
    int provided = MPI_THREAD_SINGLE;
    // Errors while starting (no mpirun where one is needed, a broken install) are MPI's own
    // fatal ones: it prints why and ends the process, as nothing else could run without it.
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_SERIALIZED) {
      MPI_Finalize();
      s.finalised = true;
      throw Error("mpi: " + library_version() + " offers thread level " + std::to_string(provided) +
                  ", below MPI_THREAD_SERIALIZED (" + std::to_string(MPI_THREAD_SERIALIZED) +
                  "), which the communicator's background thread needs");
    }
    std::atexit(finalize_at_exit);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &s.world.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &s.world.size);
  s.initialised = true;
  return s.world;
}

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
