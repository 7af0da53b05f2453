// Where this process sits in the job, read from the environment in the ecosystem's own names:
//   torchrun:  RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
//   mpirun:    OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   srun:      SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
// The first family present wins, in that order. MASTER_ADDR / MASTER_PORT (rank 0's store)
// apply to all three; without them the defaults are 127.0.0.1 and 29500, as torchrun's.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace gradsync {

struct RendezvousEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source;  // "torchrun", "mpirun", "srun" or "default" (for logs)
};

// `getenv` is injectable for tests. Throws gradsync::ConfigError naming the variable when a
// value is not an integer or out of range (rank outside [0, world), port outside 1..65535).
RendezvousEnv read_rendezvous_env(
    const std::function<std::optional<std::string>(const std::string&)>& getenv);

// The same from the process environment.
RendezvousEnv read_rendezvous_env();

}  // namespace gradsync
