// What the ranks of one job settle through the rendezvous store before they train: the store
// itself (rank 0 serves it), the run folder every rank writes into (and, on a restart, the
// checkpoint every rank goes on from), the run id, and under ps roles the shards' endpoints.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "allreduce/store.h"
#include "common/config.h"
#include "launch/rendezvous_env.h"

namespace gradsync {

// The local IP address this host sends from to reach host:port (a connected UDP socket sends
// nothing; it only asks the kernel for the route).
std::string local_address_towards(const std::string& host, int port);

// The job's rendezvous store, hosted by rank 0 at MASTER_ADDR, on the port
// launch/rendezvous_env.h says (MASTER_PORT, or the next one under torchrun, whose agent serves
// its own store on MASTER_PORT): the others connect, waiting up to `timeout` for rank 0.
std::unique_ptr<Store> connect_store(const RendezvousEnv& env, std::chrono::milliseconds timeout);

// What this rank was told about the run folder (WorkerProcessOptions' fields, which say more).
struct RunFolderRequest {
  std::string run_dir;      // given (rank 0 creates it if missing), or empty: a fresh one
  std::string preset_name;  // names the fresh folder
  std::string config_yaml;  // rank 0 writes it as config.yaml unless `gradsync run` did
  bool restart = false;     // --resume auto: the earlier attempt's folder
  bool launched_by_gradsync = false;
};

// The run folder the ranks agreed on.
struct RunFolder {
  std::string dir;
  bool restarted = false;
  std::string resume;  // restarted: the step folder every rank goes on from; empty: the start
};

// Rank 0 decides the run folder (request.run_dir, or a fresh one as `gradsync run` makes),
// creates it and tells the others through the store, so no rank writes into a folder that does
// not exist yet, and all write into the same one. On a restart (torchrun's, or --resume auto)
// it is the earlier attempt's folder, and rank 0 also says which checkpoint every rank goes on
// from (prepare_restart: rows past it are dropped from metrics.csv first).
RunFolder agree_on_run_folder(Store& store, const RendezvousEnv& env, const Config& config,
                              const RunFolderRequest& request, std::chrono::milliseconds timeout);

// The run's id under ps roles, where shards and workers are ranks of one launch: kRunIdEnv's,
// else drawn by rank 0 and shared through the store (common/run_id.h).
std::uint64_t shared_run_id(Store& store, int rank, std::chrono::milliseconds timeout);

// A shard's endpoint, posted for the workers (shard_endpoints).
void post_shard_endpoint(Store& store, int shard, const std::string& endpoint);

// The shards' endpoints, in shard order, as they post them.
std::vector<std::string> shard_endpoints(Store& store, int shards,
                                         std::chrono::milliseconds timeout);

}  // namespace gradsync
