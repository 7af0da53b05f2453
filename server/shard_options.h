// PsShardOptions: what one parameter-server shard serves and how it synchronises. Shared by the
// pure handler (ShardState) and the ZeroMQ process around it (PsShard).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/link.h"
#include "common/trace_span.h"
#include "model/optimizer/sgd.h"
#include "server/curve_keys.h"

namespace gradsync {

struct PsShardOptions {
  // kSync: every step waits for all N pushes, applies their average once (BSP).
  // kAsync: each push is applied on arrival as one SGD step of its own (Hogwild/Downpour).
  // kSsp: as kAsync, but a worker may run at most `staleness` steps ahead of the slowest.
  enum class Mode { kSync, kAsync, kSsp };

  int shard = 0;
  int shards = 1;
  int world_size = 1;
  std::uint64_t model_size = 0;  // floats in the whole model; this shard serves its range
  std::string bind_host = "127.0.0.1";
  int port = 0;  // 0: an ephemeral port, see PsShard::endpoint()
  // A socket already listening on bind_host:port, handed down by the launcher, which ZeroMQ
  // serves on instead of binding its own (ZMQ_USE_FD); -1: bind.
  int listen_fd = -1;
  Mode mode = Mode::kSync;
  int staleness = 0;  // kSsp only: the bound s
  SgdOptions sgd;
  // How long a worker may stay silent (no message, no heartbeat) before the shard gives up on
  // it, and how long serve() waits for every worker's HELLO.
  std::chrono::milliseconds timeout{60000};
  bool continue_without_dead_workers = false;  // kAsync, kSsp: drop a silent worker, go on
  std::optional<CurveKeys> curve;              // the shared key pair; absent: no encryption
  // Where the shard's one-line reports go (refusals, garbage, dead workers); stderr if empty.
  // Called from the serving thread and, with CURVE, from the authentication thread.
  std::function<void(const std::string&)> log;
  // The shard's emulated NIC (network.link_gbps): payload bytes sent and received are each
  // paced at its rate, full duplex (PsShard's send and receive queues); heartbeats and ERRORs
  // are not queued. Null: no cap.
  std::shared_ptr<Link> link;
  // The run's id (common/run_id.h): a HELLO or heartbeat carrying another is refused and
  // logged, and blames no one.
  std::uint64_t run_id = 0;
  // Where the shard's receive, apply and reply spans go (server/shard_trace.h); null: none.
  // Called from the serving thread only.
  TraceSink* trace = nullptr;
  // Also listen on shard_ipc_endpoint(port) (server/local_endpoint.h), for the workers of this
  // host.
  bool bind_ipc = false;

  // Checkpoints (sync mode only): after step t when t is a multiple of checkpoint_every or is
  // checkpoint_last_step, the shard writes its range with its optimizer state to
  // <checkpoint_root>/step-<t>/part-<shard>-of-<shards>.ckpt (common/checkpoint_file.h).
  std::int64_t checkpoint_every = 0;  // 0: none
  std::int64_t checkpoint_last_step = 0;
  std::string checkpoint_root;
  std::string checkpoint_description;  // the model, as the checkpoint records it
  std::string checkpoint_settings;     // shard 0 writes it beside its part as training.txt
  // Resuming: this shard's range from a checkpoint. The shard starts initialised at `step`
  // (no INIT expected: every worker pulls).
  struct Start {
    std::uint64_t step = 0;
    std::uint64_t optimizer_steps = 0;
    std::vector<float> params;    // the range's floats
    std::vector<float> momentum;  // the same size
  };
  std::optional<Start> resume;
};

const char* mode_name(PsShardOptions::Mode mode);

// Throws ConfigError (key "ps.*") for options that cannot work: shard outside [0, shards),
// world size < 1, staleness < 0 or outside ssp, continue_without_dead_workers in sync, ...
void validate(const PsShardOptions& options);

}  // namespace gradsync
