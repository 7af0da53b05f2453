// The bytes the kernel counted on each network namespace's link during a run
// (network.namespaces): summary.json's host_link_bytes, per shard, rank or simulated host.
#pragma once

#include <vector>

#include "common/config.h"
#include "launch/namespace_network.h"
#include "worker/summary.h"

namespace gradsync {

// Every namespace's link counters, in namespace order.
std::vector<LinkBytes> link_counts(const NamespaceNetwork& network);

// What each namespace's link carried since `before` (link_counts), named for summary.json:
// "server K" for a shard's, "rank R" for a rank's own, "host H" for a simulated host's.
// `netns_of` is the namespace of each process, shards first (namespace_of_processes).
std::vector<HostLink> host_links(const Config& config, const NamespaceNetwork& network,
                                 const std::vector<int>& netns_of, int shards,
                                 const std::vector<LinkBytes>& before);

}  // namespace gradsync
