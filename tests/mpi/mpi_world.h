// What the MPI test cases share: every process of the mpirun job runs every test case, in the
// same order, as one rank (tests/mpi/main.cpp sets this up before doctest runs them).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "allreduce/communicator.h"
#include "allreduce/mpi/mpi_communicator.h"
#include "allreduce/store.h"

namespace gradsync::testing {

struct MpiWorld {
  int rank = 0;
  int size = 1;
  Store* store = nullptr;  // a TcpStore served by rank 0 on loopback
};

const MpiWorld& mpi_world();
// The job started MPI itself at MPI_THREAD_SERIALIZED (--mpi-thread=serialized, main.cpp).
extern bool serialized_asked;

// A communicator over the whole job of its own: every rank calls it, with the same `name` (its
// Store prefix, so that test cases never read each other's reports).
inline std::unique_ptr<Communicator> mpi_communicator(
    const std::string& name, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  MpiOptions options;
  options.timeout = timeout;
  options.store_prefix = "test/" + name;
  return make_mpi_communicator(*mpi_world().store, mpi_world().rank, mpi_world().size, options);
}

}  // namespace gradsync::testing
