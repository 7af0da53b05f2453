#include "experiments/host_links.h"

namespace gradsync {

std::vector<LinkBytes> link_counts(const NamespaceNetwork& network) {
  std::vector<LinkBytes> counts;
  for (int ns = 0; ns < network.size(); ++ns) counts.push_back(network.link_bytes(ns));
  return counts;
}

std::vector<HostLink> host_links(const Config& config, const NamespaceNetwork& network,
                                 const std::vector<int>& netns_of, int shards,
                                 const std::vector<LinkBytes>& before) {
  std::vector<HostLink> links(static_cast<std::size_t>(network.size()));
  const std::vector<LinkBytes> after = link_counts(network);
  for (int ns = 0; ns < network.size(); ++ns) {
    HostLink& link = links[ns];
    link.netns = network.namespace_name(ns);
    link.sent = after[ns].sent - before[ns].sent;
    link.received = after[ns].received - before[ns].received;
    if (ns < shards) link.name = "server " + std::to_string(ns);
  }
  for (int r = 0; r < config.workers; ++r) {
    HostLink& link = links[netns_of[shards + r]];
    link.ranks.push_back(r);
    if (link.name.empty()) {
      link.name = config.network.hosts > 0 ? "host " + std::to_string(netns_of[shards + r] - shards)
                                           : "rank " + std::to_string(r);
    }
  }
  return links;
}

}  // namespace gradsync
