// The MPI communicator's test binary: one process per rank, started by mpirun (run_mpi_tests.py),
// each running the same doctest cases in the same order. MPI starts first, so that rank 0 can
// tell the others (MPI_Bcast) the ephemeral port its Store listens on.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <iostream>
#include <memory>

#include "allreduce/mpi/mpi_runtime.h"
#include "allreduce/tcp/tcp_store.h"
#include "allreduce/tcp/tcp_store_server.h"
#include "tests/mpi/mpi_world.h"

namespace gradsync::testing {
namespace {
MpiWorld world;
}  // namespace
const MpiWorld& mpi_world() { return world; }
}  // namespace gradsync::testing

int main(int argc, char** argv) {
  using namespace gradsync;
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

  doctest::Context context(argc, argv);
  const int failed = context.run();
  // Rank 0's Store server must outlive the others' last use of it: meet once more first.
  try {
    testing::mpi_communicator("end")->barrier();
  } catch (const std::exception& e) {
    std::cerr << "rank " << mpi.rank << ": final barrier: " << e.what() << "\n";
    return 1;
  }
  return failed;
}
