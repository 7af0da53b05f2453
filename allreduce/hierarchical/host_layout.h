// HostLayout: which ranks share a host, from the host id every rank published
// (common/host_id.h), as the hierarchical all-reduce groups them: hosts numbered in the order
// of their lowest rank, each host's ranks in rank order, its lowest rank its leader.
//
//   HostLayout layout = host_layout({"a", "a", "b", "b"}, 2);
//   layout.hosts == 2, layout.host == 1, layout.local_rank == 0, layout.leader() == true
//
// Pure: no I/O, any thread.
#pragma once

#include <string>
#include <vector>

namespace gradsync {

struct HostLayout {
  int hosts = 1;                                // H: distinct host ids
  int host = 0;                                 // this rank's host, 0..H-1
  int local_rank = 0;                           // this rank's place among its host's ranks
  std::vector<int> host_of_rank;                // by global rank
  std::vector<std::vector<int>> ranks_of_host;  // by host: its global ranks, ascending

  int local_size() const { return static_cast<int>(ranks_of_host[host].size()); }
  bool leader() const { return local_rank == 0; }
  // Every host has as many ranks as the others, each host's ranks contiguous and hosts in rank
  // order (0..L-1 on host 0, L..2L-1 on host 1, ...): the layout a block placement gives, where
  // an allgather's blocks line up host by host.
  bool regular() const;
  // Some host has more than one rank and there is more than one host: where a hierarchy pays.
  bool mixed() const;
};

// `ids` by global rank; rank in [0, ids.size()).
HostLayout host_layout(const std::vector<std::string>& ids, int rank);

}  // namespace gradsync
