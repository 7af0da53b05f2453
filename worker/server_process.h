// `gradsync server`: one parameter-server shard process, started by the local launcher or by
// hand on another machine. It serves the key range `shard` of ps.servers for the model the
// resolved Config describes (apps/ loads the run's config.yaml through experiments/), until every
// worker has said goodbye; then it writes server<K>.json (its traffic) into the run folder.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/config.h"

namespace gradsync {

// Throws on any failure (the caller prints it); the shard listens on `bind` (empty: ps.bind) at
// `port` (0: an ephemeral port), and then hands its endpoint ("tcp://HOST:PORT") to
// `on_listening`, by default printing "endpoint tcp://..." on stdout. It serves the workers of
// the run `run_id` (common/run_id.h) and refuses any other's.
void run_server_process(const Config& config, const std::string& run_dir, int shard, int port,
                        std::uint64_t run_id, const std::string& bind = "",
                        const std::function<void(const std::string&)>& on_listening = {});

}  // namespace gradsync
