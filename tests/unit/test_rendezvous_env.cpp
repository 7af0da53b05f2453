// launch/rendezvous_env.h: a rank's place from each launcher's variables (torchrun, Open MPI,
// MPICH and Intel MPI's PMI, PMIx, Slurm, and torchrun inside srun), describe(), and the errors
// that name a variable. Rank 0's address and the ports: test_rendezvous_address.cpp.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/support/rendezvous_vars.h"

namespace {

using gradsync::testing::failure;
using gradsync::testing::Failure;
using gradsync::testing::read;
using gradsync::testing::Vars;
using gradsync::testing::with;

}  // namespace

TEST_CASE("rendezvous env: torchrun's variables") {
  const auto env = read({{"RANK", "3"},
                         {"WORLD_SIZE", "4"},
                         {"LOCAL_RANK", "1"},
                         {"MASTER_ADDR", "10.1.2.3"},
                         {"MASTER_PORT", "1234"}});
  CHECK(env.source == "torchrun");
  CHECK(env.rank == 3);
  CHECK(env.world_size == 4);
  CHECK(env.local_rank == 1);
  CHECK(env.master_addr == "10.1.2.3");
  CHECK(env.master_port == 1234);
}

TEST_CASE("rendezvous env: torchrun's node, local world and restart count") {
  const auto env = read({{"RANK", "5"},
                         {"WORLD_SIZE", "8"},
                         {"LOCAL_RANK", "1"},
                         {"LOCAL_WORLD_SIZE", "4"},
                         {"GROUP_RANK", "1"},
                         {"TORCHELASTIC_RESTART_COUNT", "2"},
                         {"TORCHELASTIC_RUN_ID", "job-7"},
                         {"MASTER_ADDR", "node0"},
                         {"MASTER_PORT", "29400"}});
  CHECK(env.source == "torchrun");
  CHECK(env.rank == 5);
  CHECK(env.local_rank == 1);
  CHECK(env.local_world_size == 4);
  CHECK(env.node_rank == 1);
  CHECK(env.restart_count == 2);
  CHECK(env.master_port == 29400);
  CHECK(env.store_port == 29401);
}

TEST_CASE("rendezvous env: mpirun, then srun, when torchrun's are absent") {
  auto env = read({{"OMPI_COMM_WORLD_RANK", "2"},
                   {"OMPI_COMM_WORLD_SIZE", "8"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                   {"SLURM_PROCID", "5"},
                   {"SLURM_NTASKS", "6"}});
  CHECK(env.source == "mpirun");
  CHECK(env.rank == 2);
  CHECK(env.world_size == 8);
  env = read({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "1"}});
  CHECK(env.source == "srun");
  CHECK(env.rank == 5);
  CHECK(env.local_rank == 1);
  CHECK(env.master_addr == "127.0.0.1");
  CHECK(env.master_port == 29500);
}

TEST_CASE("rendezvous env: no launcher means one process of one") {
  const auto env = read({});
  CHECK(env.source == "default");
  CHECK(env.rank == 0);
  CHECK(env.world_size == 1);
  CHECK(env.local_rank == 0);
  CHECK(env.local_world_size == 1);
  CHECK(env.node_rank == 0);
  CHECK(env.restart_count == 0);
  CHECK(env.master_addr == "127.0.0.1");
  CHECK(env.master_port == 29500);
  CHECK(env.store_port == 29500);
}

TEST_CASE("rendezvous env: a hand-set RANK and WORLD_SIZE is one machine") {
  const auto env = read({{"RANK", "2"}, {"WORLD_SIZE", "3"}});
  CHECK(env.local_rank == 2);
  CHECK(env.local_world_size == 3);
  CHECK(env.node_rank == 0);
  CHECK(env.master_addr == "127.0.0.1");
}

TEST_CASE("rendezvous env: Open MPI's local size, and no node index from its NODE_RANK") {
  const auto env = read({{"OMPI_COMM_WORLD_RANK", "6"},
                         {"OMPI_COMM_WORLD_SIZE", "8"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                         // A rank among all jobs' processes on this node, not the node's index.
                         {"OMPI_COMM_WORLD_NODE_RANK", "2"},
                         {"MASTER_ADDR", "head"}});
  CHECK(env.source == "mpirun");
  CHECK(env.rank == 6);
  CHECK(env.local_rank == 2);
  CHECK(env.local_world_size == 4);
  CHECK(env.node_rank == 0);
  CHECK(env.master_addr == "head");
}

TEST_CASE("rendezvous env: MPICH and Intel MPI's PMI variables") {
  auto env = read({{"PMI_RANK", "3"},
                   {"PMI_SIZE", "4"},
                   {"MPI_LOCALRANKID", "1"},
                   {"MPI_LOCALNRANKS", "2"},
                   {"MASTER_ADDR", "head"}});
  CHECK(env.source == "pmi");
  CHECK(env.rank == 3);
  CHECK(env.world_size == 4);
  CHECK(env.local_rank == 1);
  CHECK(env.local_world_size == 2);
  // Without Hydra's local variables: one machine, as for a hand-set RANK.
  env = read({{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}});
  CHECK(env.source == "pmi");
  CHECK(env.local_rank == 3);
  CHECK(env.local_world_size == 4);
  CHECK(env.master_addr == "127.0.0.1");
}

TEST_CASE("rendezvous env: PMIx takes its size from OMPI_, SLURM_ or PMI_ variables") {
  auto env = read({{"PMIX_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  CHECK(env.source == "pmix");
  CHECK(env.rank == 2);
  CHECK(env.world_size == 4);
  env = read({{"PMIX_RANK", "2"}, {"PMI_SIZE", "3"}});
  CHECK(env.source == "pmix");
  CHECK(env.world_size == 3);
  // Under srun --mpi=pmix: Slurm describes the same processes, so it fills in the rest.
  env = read({{"PMIX_RANK", "3"},
              {"SLURM_PROCID", "3"},
              {"SLURM_NTASKS", "4"},
              {"SLURM_LOCALID", "1"},
              {"SLURM_NODEID", "1"},
              {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
              {"SLURM_STEP_NODELIST", "gpu[07-08]"},
              {"SLURM_JOB_ID", "123456"}});
  CHECK(env.source == "pmix");
  CHECK(env.rank == 3);
  CHECK(env.world_size == 4);
  CHECK(env.local_rank == 1);
  CHECK(env.local_world_size == 2);
  CHECK(env.node_rank == 1);
  CHECK(env.master_addr == "gpu07");
  CHECK(env.master_port == 23456);
  const Failure f = failure({{"PMIX_RANK", "2"}});
  CHECK(f.key == "PMIX_RANK");
  CHECK(f.message ==
        "environment: PMIX_RANK: set to '2', but no world size beside it (expected "
        "OMPI_COMM_WORLD_SIZE, SLURM_NTASKS or PMI_SIZE)");
}

TEST_CASE("rendezvous env: srun's variables and ranks per node") {
  const Vars base = {{"SLURM_PROCID", "6"},      {"SLURM_NTASKS", "7"},
                     {"SLURM_LOCALID", "0"},     {"SLURM_NODEID", "2"},
                     {"SLURM_JOB_ID", "987654"}, {"SLURM_JOB_NODELIST", "cn[1-3]"}};
  const Vars uneven = with(base, {{"SLURM_TASKS_PER_NODE", "3(x2),1"}});  // cn1..3: 3, 3, 1
  auto env = read(uneven);
  CHECK(env.source == "srun");
  CHECK(env.rank == 6);
  CHECK(env.world_size == 7);
  CHECK(env.local_rank == 0);
  CHECK(env.local_world_size == 1);
  CHECK(env.node_rank == 2);
  CHECK(env.master_addr == "cn1");
  CHECK(env.master_port == 27654);
  CHECK(env.store_port == 27654);
  // The step's own list beats the job's.
  CHECK(read(with(uneven, {{"SLURM_STEP_TASKS_PER_NODE", "2,2,3"}})).local_world_size == 3);
  // --ntasks-per-node when there is no list.
  CHECK(read(with(base, {{"SLURM_NTASKS_PER_NODE", "4"}})).local_world_size == 4);
  // Neither: one machine assumed, as for a hand-set RANK.
  CHECK(read(base).local_world_size == 7);
  // Tasks per node without SLURM_NODEID: the first entry.
  env = read({{"SLURM_PROCID", "1"},
              {"SLURM_NTASKS", "4"},
              {"SLURM_LOCALID", "1"},
              {"SLURM_TASKS_PER_NODE", "2(x2)"},
              {"SLURM_JOB_NODELIST", "a,b"}});
  CHECK(env.local_world_size == 2);
  CHECK(env.node_rank == 0);
}

TEST_CASE("rendezvous env: torchrun inside srun takes torchrun's view") {
  // srun --ntasks-per-node=1 torchrun --nproc-per-node=4: Slurm's task is the agent.
  const auto env = read({{"RANK", "6"},
                         {"WORLD_SIZE", "8"},
                         {"LOCAL_RANK", "2"},
                         {"LOCAL_WORLD_SIZE", "4"},
                         {"GROUP_RANK", "1"},
                         {"TORCHELASTIC_RUN_ID", "42"},
                         {"MASTER_ADDR", "gpu01"},
                         {"MASTER_PORT", "29500"},
                         {"SLURM_PROCID", "1"},
                         {"SLURM_NTASKS", "2"},
                         {"SLURM_LOCALID", "0"},
                         {"SLURM_NODEID", "1"},
                         {"SLURM_TASKS_PER_NODE", "1(x2)"},
                         {"SLURM_STEP_NODELIST", "gpu[01-02]"},
                         {"SLURM_JOB_ID", "77"}});
  CHECK(env.source == "torchrun");
  CHECK(env.rank == 6);
  CHECK(env.world_size == 8);
  CHECK(env.local_rank == 2);
  CHECK(env.local_world_size == 4);
  CHECK(env.node_rank == 1);
  CHECK(env.master_addr == "gpu01");
  CHECK(env.master_port == 29500);
  CHECK(env.store_port == 29501);
}

TEST_CASE("rendezvous env: describe() is one log line") {
  auto env = read({{"RANK", "1"},
                   {"WORLD_SIZE", "4"},
                   {"LOCAL_RANK", "1"},
                   {"LOCAL_WORLD_SIZE", "2"},
                   {"GROUP_RANK", "0"},
                   {"TORCHELASTIC_RUN_ID", "r"},
                   {"MASTER_ADDR", "10.0.0.1"},
                   {"MASTER_PORT", "29500"}});
  CHECK(env.describe() ==
        "rank 1 of 4 (local 1 of 2, node 0) from torchrun, store at 10.0.0.1:29501");
  env.restart_count = 3;
  env.master_addr = "fe80::1";
  CHECK(env.describe() ==
        "rank 1 of 4 (local 1 of 2, node 0) from torchrun, restart 3, store at [fe80::1]:29501");
  CHECK(read({}).describe() ==
        "rank 0 of 1 (local 0 of 1, node 0) from default, store at "
        "127.0.0.1:29500");
}

TEST_CASE("rendezvous env: bad values name the variable") {
  CHECK_THROWS_WITH(read({{"RANK", "4"}, {"WORLD_SIZE", "4"}}), doctest::Contains("RANK"));
  CHECK_THROWS_WITH(read({{"RANK", "x"}, {"WORLD_SIZE", "4"}}),
                    doctest::Contains("RANK: expected an integer, got 'x'"));
  CHECK_THROWS_WITH(read({{"RANK", "0"}}), doctest::Contains("WORLD_SIZE: missing"));
  CHECK_THROWS_WITH(read({{"MASTER_PORT", "70000"}}), doctest::Contains("MASTER_PORT"));
}

TEST_CASE("rendezvous env: every error names its variable and quotes its value") {
  struct Case {
    Vars vars;
    std::string key;
    std::string message;
  };
  const std::vector<Case> cases = {
      // Not an integer, out of range, rank not below the world size.
      {{{"RANK", "1"}, {"WORLD_SIZE", "four"}}, "WORLD_SIZE", "expected an integer, got 'four'"},
      {{{"RANK", " 1"}, {"WORLD_SIZE", "4"}}, "RANK", "expected an integer, got ' 1'"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE", "'0' is outside [1, 1048576]"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "99999999999999999999"}},
       "WORLD_SIZE",
       "'99999999999999999999' is outside [1, 1048576]"},
      {{{"RANK", "4"}, {"WORLD_SIZE", "4"}}, "RANK", "'4' is outside [0, 3] (WORLD_SIZE is 4)"},
      {{{"RANK", "-1"}, {"WORLD_SIZE", "4"}}, "RANK", "'-1' is outside [0, 3] (WORLD_SIZE is 4)"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "5"}},
       "LOCAL_WORLD_SIZE",
       "'5' is outside [1, 4] (WORLD_SIZE is 4)"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}},
       "LOCAL_RANK",
       "'2' is outside [0, 1] (LOCAL_WORLD_SIZE is 2)"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "4"}},
       "LOCAL_RANK",
       "'4' is outside [0, 3] (WORLD_SIZE is 4)"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}},
       "LOCAL_RANK",
       "missing, but LOCAL_WORLD_SIZE is set to '2' (the ranks span nodes, so the rank is not "
       "the local rank)"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"GROUP_RANK", "g"}},
       "GROUP_RANK",
       "expected an integer, got 'g'"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"TORCHELASTIC_RESTART_COUNT", "-2"}},
       "TORCHELASTIC_RESTART_COUNT",
       "'-2' is outside [0, 2147483647]"},
      // A family with only one of its rank and size.
      {{{"RANK", "0"}}, "WORLD_SIZE", "missing, but RANK is set to '0' (torchrun sets both)"},
      {{{"WORLD_SIZE", "2"}}, "RANK", "missing, but WORLD_SIZE is set to '2' (torchrun sets both)"},
      {{{"OMPI_COMM_WORLD_SIZE", "2"}},
       "OMPI_COMM_WORLD_RANK",
       "missing, but OMPI_COMM_WORLD_SIZE is set to '2' (Open MPI's mpirun sets both)"},
      {{{"OMPI_COMM_WORLD_RANK", "1"},
        {"OMPI_COMM_WORLD_SIZE", "2"},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "x"}},
       "OMPI_COMM_WORLD_LOCAL_SIZE",
       "expected an integer, got 'x'"},
      {{{"PMI_RANK", "1"}},
       "PMI_SIZE",
       "missing, but PMI_RANK is set to '1' (MPICH's and Intel MPI's launchers set both)"},
      {{{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "2"}},
       "MPI_LOCALRANKID",
       "'2' is outside [0, 1] (MPI_LOCALNRANKS is 2)"},
      {{{"PMIX_RANK", "4"}, {"SLURM_NTASKS", "4"}},
       "PMIX_RANK",
       "'4' is outside [0, 3] (SLURM_NTASKS is 4)"},
      {{{"PMIX_RANK", "0"}, {"PMI_SIZE", "zero"}}, "PMI_SIZE", "expected an integer, got 'zero'"},
      {{{"SLURM_NTASKS", "4"}},
       "SLURM_PROCID",
       "missing, but SLURM_NTASKS is set to '4' (srun sets both; in an salloc or sbatch shell, "
       "start the workers with srun)"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "id"}},
       "SLURM_LOCALID",
       "expected an integer, got 'id'"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_NODEID", "4"}},
       "SLURM_NODEID",
       "'4' is outside [0, 3] (SLURM_NTASKS is 4)"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_TASKS_PER_NODE", "2(x2"}},
       "SLURM_TASKS_PER_NODE",
       "expected counts such as '2(x3),1', got '2(x2' (at '2(x2')"},
      {{{"SLURM_PROCID", "0"},
        {"SLURM_NTASKS", "4"},
        {"SLURM_NODEID", "1"},
        {"SLURM_TASKS_PER_NODE", "2,,2"}},
       "SLURM_TASKS_PER_NODE",
       "expected counts such as '2(x3),1', got '2,,2' (at '')"},
      {{{"SLURM_PROCID", "0"},
        {"SLURM_NTASKS", "4"},
        {"SLURM_NODEID", "2"},
        {"SLURM_TASKS_PER_NODE", "2(x2)"}},
       "SLURM_NODEID",
       "'2' is outside [0, 1] (SLURM_TASKS_PER_NODE is '2(x2)')"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_STEP_TASKS_PER_NODE", "8"}},
       "SLURM_STEP_TASKS_PER_NODE",
       "'8' puts 8 ranks on node 0, outside [1, 4] (SLURM_NTASKS is 4)"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_NTASKS_PER_NODE", "0"}},
       "SLURM_NTASKS_PER_NODE",
       "'0' is outside [1, 4] (SLURM_NTASKS is 4)"},
      {{{"SLURM_PROCID", "0"},
        {"SLURM_NTASKS", "4"},
        {"SLURM_LOCALID", "2"},
        {"SLURM_NTASKS_PER_NODE", "2"}},
       "SLURM_LOCALID",
       "'2' is outside [0, 1] (SLURM_NTASKS_PER_NODE is 2)"},
      // Addresses and ports.
      {{{"MASTER_ADDR", ""}}, "MASTER_ADDR", "is empty"},
      {{{"MASTER_PORT", "0"}}, "MASTER_PORT", "'0' is outside [1, 65535]"},
      {{{"MASTER_PORT", "70000"}}, "MASTER_PORT", "'70000' is outside [1, 65535]"},
      {{{"MASTER_PORT", "29500x"}}, "MASTER_PORT", "expected an integer, got '29500x'"},
      {{{"SLURM_JOB_ID", "12a"}}, "SLURM_JOB_ID", "expected an integer, got '12a'"},
      {{{"SLURM_JOB_ID", "-5"}}, "SLURM_JOB_ID", "'-5' is outside [0, 9223372036854775807]"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.key);
    CAPTURE(c.message);
    const Failure f = failure(c.vars);
    CHECK(f.key == c.key);
    CHECK(f.message == "environment: " + c.key + ": " + c.message);
  }
}
