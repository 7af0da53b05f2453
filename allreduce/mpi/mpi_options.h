// What an MpiCommunicator is made with (mpi_communicator.h): its own header, since the runner
// that does its collectives (mpi_runner.h) reads it too, and mpi_communicator.cpp includes that.
#pragma once

#include <chrono>
#include <string>

namespace gradsync {

struct MpiOptions {
  std::chrono::milliseconds timeout{60000};  // every collective, and joining
  std::string store_prefix = "mpi";          // several communicators can share one Store
  // Every collective starts with an allgather of a 32-byte header, so that ranks that issue
  // different collectives fail with a desync error naming both (mpi_communicator.h).
  bool check_desync = true;
};

}  // namespace gradsync
