// The MPI communicator's test binary: one process per rank, started by mpirun (run_mpi_tests.py),
// each running the same doctest cases in the same order. MPI starts first, so that rank 0 can
// tell the others (MPI_Bcast) the ephemeral port its Store listens on.
//
// --mpi-thread=serialized (before doctest's own options) starts MPI here at
// MPI_THREAD_SERIALIZED, as a program that started MPI itself would, so that the communicators
// take their polled path (mpi_runner.h); without it gradsync starts MPI, at MULTIPLE where the
// library offers it, and they make blocking calls. run_mpi_tests.py runs every case both ways.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstring>
#include <iostream>
#include <memory>
#include <vector>

#include "allreduce/mpi/mpi_runtime.h"
#include "allreduce/tcp/tcp_store.h"
#include "allreduce/tcp/tcp_store_server.h"
#include "tests/mpi/mpi_world.h"

namespace gradsync::testing {
namespace {
MpiWorld world;
}  // namespace
const MpiWorld& mpi_world() { return world; }
bool serialized_asked = false;
}  // namespace gradsync::testing

int main(int argc, char** argv) {
  using namespace gradsync;
  std::vector<char*> args(argv, argv + argc);
  if (args.size() > 1 && std::strcmp(args[1], "--mpi-thread=serialized") == 0) {
    args.erase(args.begin() + 1);
    testing::serialized_asked = true;
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  }
  const mpi::World mpi = mpi::init_mpi_once();
  std::unique_ptr<tcp::TcpStoreServer> server;
  int port = 0;
  if (mpi.rank == 0) {
    server = std::make_unique<tcp::TcpStoreServer>("127.0.0.1", 0);
    port = server->port();
  }
  {
    auto held = mpi::lock();
    MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
  }
  TcpStoreOptions options;
  options.port = port;
  options.timeout = std::chrono::seconds(30);
  const std::unique_ptr<Store> store = make_tcp_store(options);
  testing::world = {mpi.rank, mpi.size, store.get()};

  doctest::Context context(int(args.size()), args.data());
  const int failed = context.run();
  // Rank 0's Store server must outlive the others' last use of it: meet once more first.
  try {
    testing::mpi_communicator("end")->barrier();
  } catch (const std::exception& e) {
    std::cerr << "rank " << mpi.rank << ": final barrier: " << e.what() << "\n";
    return 1;
  }
  // Who starts MPI finalises it: gradsync registered nothing for an MPI started here.
  if (testing::serialized_asked) MPI_Finalize();
  return failed;
}
