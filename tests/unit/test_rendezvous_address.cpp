// launch/rendezvous_env.h: where rank 0 is (MASTER_ADDR, or the first host of Slurm's node list)
// and the job's ports (MASTER_PORT, the store's port beside it).
#include <doctest/doctest.h>

#include <string>

#include "tests/support/rendezvous_vars.h"

namespace {

using gradsync::testing::failure;
using gradsync::testing::Failure;
using gradsync::testing::read;
using gradsync::testing::Vars;
using gradsync::testing::with;

}  // namespace

TEST_CASE("rendezvous env: Open MPI inside sbatch takes rank 0's host from the job's list") {
  // A rank on the third node: Open MPI's daemons ran as a step on every node but the first
  // (where mpirun itself runs rank 0), and the ranks inherit that step's variables.
  const auto env = read({{"OMPI_COMM_WORLD_RANK", "9"},
                         {"OMPI_COMM_WORLD_SIZE", "12"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                         {"SLURM_PROCID", "1"},
                         {"SLURM_NTASKS", "2"},
                         {"SLURM_LOCALID", "0"},
                         {"SLURM_NODEID", "1"},
                         {"SLURM_STEP_NODELIST", "node[02-03]"},
                         {"SLURM_JOB_NODELIST", "node[01-03]"},
                         {"SLURM_JOB_ID", "31337"}});
  CHECK(env.source == "mpirun");
  CHECK(env.rank == 9);
  CHECK(env.local_rank == 1);
  CHECK(env.local_world_size == 4);
  CHECK(env.node_rank == 0);  // Open MPI has no node index, and Slurm's is the daemon's
  CHECK(env.master_addr == "node01");
  CHECK(env.master_port == 21337);
  CHECK(env.store_port == 21337);
}

TEST_CASE("rendezvous env: MASTER_ADDR from SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST") {
  const Vars vars = {{"SLURM_PROCID", "0"},
                     {"SLURM_NTASKS", "4"},
                     {"SLURM_LOCALID", "0"},
                     {"SLURM_TASKS_PER_NODE", "2(x2)"},
                     {"SLURM_JOB_NODELIST", "rack[1-2]-gpu[03-04]"}};
  CHECK(read(vars).master_addr == "rack1-gpu03");
  const Vars step = with(vars, {{"SLURM_STEP_NODELIST", "rack2-gpu[07,09]"}});
  CHECK(read(step).master_addr == "rack2-gpu07");
  // The environment's MASTER_ADDR wins over both.
  CHECK(read(with(step, {{"MASTER_ADDR", "10.0.0.9"}})).master_addr == "10.0.0.9");
  // With an inner torchrun-style family too (RANK set by hand inside srun).
  const Vars inner = {{"RANK", "1"},
                      {"WORLD_SIZE", "2"},
                      {"LOCAL_RANK", "0"},
                      {"LOCAL_WORLD_SIZE", "1"},
                      {"SLURM_JOB_NODELIST", "login1,cn[5-6]"}};
  CHECK(read(inner).master_addr == "login1");
  // A malformed list names its variable.
  const Failure f = failure(with(inner, {{"SLURM_JOB_NODELIST", "cn[5-6"}}));
  CHECK(f.key == "SLURM_JOB_NODELIST");
  CHECK(f.message ==
        "environment: SLURM_JOB_NODELIST: unbalanced '[' (no closing ']') in 'cn[5-6'");
}

TEST_CASE("rendezvous env: MASTER_ADDR without a node list") {
  // Every rank here: loopback.
  auto env =
      read({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}});
  CHECK(env.master_addr == "127.0.0.1");
  // Ranks on other nodes and nothing to find rank 0's host with.
  const Failure f =
      failure({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}});
  CHECK(f.key == "MASTER_ADDR");
  CHECK(f.message ==
        "environment: MASTER_ADDR: not set, and no node list to take rank 0's host from (set "
        "MASTER_ADDR to rank 0's host)");
  // A process alone in an salloc shell ignores the allocation's list.
  env = read({{"SLURM_JOB_NODELIST", "cn[1-4]"}});
  CHECK(env.source == "default");
  CHECK(env.master_addr == "127.0.0.1");
}

TEST_CASE("rendezvous env: MASTER_PORT from the environment, SLURM_JOB_ID or torchrun's default") {
  CHECK(read({{"MASTER_PORT", "4000"}, {"SLURM_JOB_ID", "5"}}).master_port == 4000);
  CHECK(read({{"SLURM_JOB_ID", "5"}}).master_port == 20005);
  CHECK(read({{"SLURM_JOB_ID", "1234567"}}).master_port == 24567);
  CHECK(read({{"SLURM_JOB_ID", "4294967295"}}).master_port == 27295);
  CHECK(read({}).master_port == 29500);
}

TEST_CASE("rendezvous env: store_port") {
  // Outside torchrun, the store is on MASTER_PORT.
  CHECK(read({{"MASTER_PORT", "4000"}}).store_port == 4000);
  // torchrun's agent holds MASTER_PORT: one above.
  const Vars torchrun = {{"RANK", "0"},
                         {"WORLD_SIZE", "2"},
                         {"MASTER_PORT", "29500"},
                         {"TORCHELASTIC_RUN_ID", "none"},
                         {"LOCAL_RANK", "0"},
                         {"LOCAL_WORLD_SIZE", "2"}};
  CHECK(read(torchrun).store_port == 29501);
  CHECK(read(torchrun).master_port == 29500);
  // GRADSYNC_STORE_PORT wins everywhere.
  CHECK(read(with(torchrun, {{"GRADSYNC_STORE_PORT", "31000"}})).store_port == 31000);
  CHECK(read({{"GRADSYNC_STORE_PORT", "1"}}).store_port == 1);
  CHECK(read({{"GRADSYNC_STORE_PORT", "65535"}}).store_port == 65535);
  // Nothing above 65535.
  const Vars top = with(torchrun, {{"MASTER_PORT", "65535"}});
  Failure f = failure(top);
  CHECK(f.key == "MASTER_PORT");
  CHECK(f.message ==
        "environment: MASTER_PORT: '65535' leaves no port above it for gradsync's store (under "
        "torchrun it listens on MASTER_PORT + 1); set GRADSYNC_STORE_PORT");
  CHECK(read(with(top, {{"GRADSYNC_STORE_PORT", "30000"}})).store_port == 30000);
  f = failure({{"GRADSYNC_STORE_PORT", "0"}});
  CHECK(f.key == "GRADSYNC_STORE_PORT");
  CHECK(f.message == "environment: GRADSYNC_STORE_PORT: '0' is outside [1, 65535]");
  f = failure({{"GRADSYNC_STORE_PORT", "port"}});
  CHECK(f.message == "environment: GRADSYNC_STORE_PORT: expected an integer, got 'port'");
}
