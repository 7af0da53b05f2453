// Where this process sits in the job, read from the environment in the names the launchers
// users already have write it:
//
//   const RendezvousEnv env = read_rendezvous_env();
//   std::cerr << env.describe() << "\n";  // rank 1 of 4 (local 1 of 2, node 0) from torchrun, ...
//   // rank 0 serves gradsync's store at env.master_addr:env.store_port; every rank connects.
//
// Families, innermost launcher first: `srun torchrun ...` and `mpirun` inside `sbatch` are
// normal, and there the outer launcher's variables describe the launcher, not the ranks.
//   torchrun  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (the node's index),
//             TORCHELASTIC_RESTART_COUNT
//   mpirun    Open MPI: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE. Open MPI has no
//             node index: its OMPI_COMM_WORLD_NODE_RANK is a rank among all jobs' processes on
//             this node, so it is not read.
//   pmi       MPICH's Hydra and Intel MPI: PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
//   pmix      PMIX_RANK (PRRTE, srun --mpi=pmix); PMIx keeps the size out of the environment,
//             so it comes from OMPI_COMM_WORLD_SIZE, else SLURM_NTASKS, else PMI_SIZE
//   srun      SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID; ranks on this node from
//             this node's entry of SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE ("2(x3),1"
//             is 2, 2, 2, 1 on nodes 0..3), else SLURM_NTASKS_PER_NODE
//   default   none of the above: one process alone, rank 0 of 1
// A family is present when its rank variable is; its size must then be set too. (OMPI_ and
// PMI_SIZE alone, beside PMIX_RANK, only give PMIx its size.)
//
// What a family leaves out (PMIx's local rank, pmi2's ranks per node, node indexes under MPI)
// is taken from Slurm when Slurm's variables describe the same processes (SLURM_PROCID and
// SLURM_NTASKS equal to the rank and world size, as under `srun --mpi=pmix`); otherwise the
// local rank is the rank and every rank is taken to be on this node (local_world_size ==
// world_size, node 0): a hand-set RANK / WORLD_SIZE, as before these fields existed.
//
// MASTER_ADDR (rank 0's host), the first that applies:
//   1. MASTER_ADDR when set (set but empty is an error);
//   2. under Slurm, the first host of the node list (launch/hostlist.h): SLURM_STEP_NODELIST,
//      else SLURM_JOB_NODELIST, when srun started the ranks; the other way round when an inner
//      launcher did (mpirun inside sbatch: rank 0 is on the job's first node, where mpirun
//      runs, and Open MPI starts its daemons on the other nodes as a step of their own, whose
//      list leaves that node out). Not for the default family: a process alone in an salloc
//      shell may not be on the allocation's first node;
//   3. 127.0.0.1 when every rank is on this node (local_world_size == world_size);
//   4. otherwise a ConfigError naming MASTER_ADDR.
// MASTER_PORT (the launcher's rendezvous port), the first that applies:
//   1. MASTER_PORT when set;
//   2. under Slurm, 20000 + SLURM_JOB_ID % 10000: every rank of a job derives the same port,
//      two jobs sharing a node get different ones unless their ids differ by a multiple of
//      10000, and 20000..29999 stays below Linux's ephemeral ports (32768..60999), so an
//      outgoing connection cannot already hold it;
//   3. 29500, torchrun's default.
// store_port, where rank 0 serves gradsync's own rendezvous store and every rank connects:
//   1. GRADSYNC_STORE_PORT when set (1..65535);
//   2. under torchrun (TORCHELASTIC_RUN_ID is set), MASTER_PORT + 1: torchrun's agent already
//      serves its own store on MASTER_PORT (MASTER_PORT 65535 is then an error);
//   3. MASTER_PORT.
//
// Errors: every malformed value throws one gradsync::ConfigError("environment", VARIABLE, ...)
// naming the variable and quoting its value: not an integer, out of range (a rank not below
// its world size, a local rank not below the ranks on its node, a port outside 1..65535), a
// family's rank without its size or the other way round, PMIX_RANK with no size beside it, a
// malformed node list.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "launch/hostlist.h"

namespace gradsync {

struct RendezvousEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;  // ranks on this node
  int node_rank = 0;         // this node's index (GROUP_RANK, SLURM_NODEID); 0 when unknown
  int restart_count = 0;     // TORCHELASTIC_RESTART_COUNT (0 elsewhere)
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // the launcher's MASTER_PORT
  int store_port = 29500;   // where gradsync's rendezvous store listens (see above)
  // Which setting gave store_port, for messages: "MASTER_PORT", "MASTER_PORT + 1 (torchrun)",
  // "GRADSYNC_STORE_PORT", "SLURM_JOB_ID" or "torchrun's default 29500".
  std::string store_port_from = "torchrun's default 29500";
  std::string source;       // "torchrun", "mpirun", "pmi", "pmix", "srun" or "default" (for logs)

  // One log line: "rank 1 of 4 (local 1 of 2, node 0) from torchrun, store at 10.0.0.1:29501",
  // with ", restart 2" after the source once torchrun has restarted the workers.
  std::string describe() const;
};

// `getenv` is injectable for tests. Throws gradsync::ConfigError as described above.
RendezvousEnv read_rendezvous_env(
    const std::function<std::optional<std::string>(const std::string&)>& getenv);

// The same from the process environment.
RendezvousEnv read_rendezvous_env();

}  // namespace gradsync
