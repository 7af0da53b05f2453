#include <doctest/doctest.h>

#include <map>

#include "common/error.h"
#include "launch/rendezvous_env.h"

namespace {

gradsync::RendezvousEnv read(const std::map<std::string, std::string>& vars) {
  return gradsync::read_rendezvous_env([&](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  });
}

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
}

TEST_CASE("rendezvous env: bad values name the variable") {
  CHECK_THROWS_WITH(read({{"RANK", "4"}, {"WORLD_SIZE", "4"}}), doctest::Contains("RANK"));
  CHECK_THROWS_WITH(read({{"RANK", "x"}, {"WORLD_SIZE", "4"}}),
                    doctest::Contains("RANK: expected an integer, got 'x'"));
  CHECK_THROWS_WITH(read({{"RANK", "0"}}), doctest::Contains("WORLD_SIZE: missing"));
  CHECK_THROWS_WITH(read({{"MASTER_PORT", "70000"}}), doctest::Contains("MASTER_PORT"));
}
