#include "allreduce/hierarchical/host_layout.h"

#include <algorithm>
#include <map>

#include "common/error.h"

namespace gradsync {

bool HostLayout::regular() const {
  const std::size_t per_host = ranks_of_host.front().size();
  int next = 0;
  for (const std::vector<int>& ranks : ranks_of_host) {
    if (ranks.size() != per_host) return false;
    for (int r : ranks) {
      if (r != next++) return false;
    }
  }
  return true;
}

bool HostLayout::mixed() const {
  if (hosts < 2) return false;
  return std::any_of(ranks_of_host.begin(), ranks_of_host.end(),
                     [](const std::vector<int>& ranks) { return ranks.size() > 1; });
}

HostLayout host_layout(const std::vector<std::string>& ids, int rank) {
  GRADSYNC_CHECK(rank >= 0 && rank < static_cast<int>(ids.size()),
                 "host layout: rank " + std::to_string(rank) + " of " + std::to_string(ids.size()));
  HostLayout layout;
  std::map<std::string, int> number;
  for (int r = 0; r < static_cast<int>(ids.size()); ++r) {
    const auto [it, added] = number.emplace(ids[r], static_cast<int>(layout.ranks_of_host.size()));
    if (added) layout.ranks_of_host.emplace_back();
    layout.ranks_of_host[it->second].push_back(r);
    layout.host_of_rank.push_back(it->second);
  }
  layout.hosts = static_cast<int>(layout.ranks_of_host.size());
  layout.host = layout.host_of_rank[rank];
  const std::vector<int>& mine = layout.ranks_of_host[layout.host];
  layout.local_rank = static_cast<int>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
  return layout;
}

}  // namespace gradsync
