#include "server/shard_options.h"

#include "common/error.h"

namespace gradsync {

const char* mode_name(PsShardOptions::Mode mode) {
  switch (mode) {
    case PsShardOptions::Mode::kSync:
      return "sync";
    case PsShardOptions::Mode::kAsync:
      return "async";
    case PsShardOptions::Mode::kSsp:
      return "ssp";
  }
  return "unknown";
}

void validate(const PsShardOptions& o) {
  const std::string where = "shard options";
  auto bad = [&](const std::string& key, const std::string& problem) {
    throw ConfigError(where, key, problem);
  };
  if (o.shards < 1) bad("ps.servers", std::to_string(o.shards) + ": need at least one shard");
  if (o.shard < 0 || o.shard >= o.shards) {
    bad("ps.shard", std::to_string(o.shard) + " is not in [0, " + std::to_string(o.shards) + ")");
  }
  if (o.world_size < 1) bad("workers", std::to_string(o.world_size) + ": need at least one");
  if (o.port < 0 || o.port > 65535) bad("ps.port", std::to_string(o.port) + " is not a TCP port");
  if (o.bind_host.empty()) bad("ps.bind_host", "empty: name an interface, e.g. 127.0.0.1");
  if (o.staleness < 0) bad("ps.staleness", std::to_string(o.staleness) + ": must be >= 0");
  if (o.mode != PsShardOptions::Mode::kSsp && o.staleness != 0) {
    bad("ps.staleness",
        "only meaningful in ssp mode, this shard runs " + std::string(mode_name(o.mode)));
  }
  if (o.continue_without_dead_workers && o.mode == PsShardOptions::Mode::kSync) {
    // Sync cannot average over a worker that is gone without silently changing the answer.
    bad("ps.continue_without_dead_workers", "not possible in sync mode (async and ssp only)");
  }
  if (o.timeout.count() <= 0) bad("comm.timeout_s", "must be positive");
  if ((o.checkpoint_every > 0 || o.resume) && o.mode != PsShardOptions::Mode::kSync) {
    bad(o.resume ? "checkpoint.resume" : "checkpoint.every",
        "ps checkpoints need sync mode: in " + std::string(mode_name(o.mode)) +
            " mode the shards share no step");
  }
  if (o.checkpoint_every < 0) bad("checkpoint.every", "must be >= 0");
}

}  // namespace gradsync
