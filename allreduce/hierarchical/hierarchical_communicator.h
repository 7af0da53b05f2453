// HierarchicalCommunicator: the all-reduce for ranks on several hosts, each with several ranks
// (Horovod's hierarchical all-reduce; NCCL's rings and trees over nodes do the same in spirit):
// the bytes that cross hosts are those of one rank per host, and what stays within a host goes
// through shared memory.
//
//   allreduce: 1. within each host, all-reduce (sum) over shared memory  (allreduce/shm/)
//              2. among the H leaders (each host's lowest rank), all-reduce over the network
//                 (tcp ring or gloo)
//              3. within each host, the leader broadcasts the result over shared memory
//   Inter-host bytes per step: 2 (H - 1) S in all, against the flat ring's H 2 (N - 1)/N S
//   (the ring crosses each host boundary once: 1.5 S per boundary at N = 4): the cost model
//   has both (experiments/cost_model.h).
//
// broadcast and barrier take the same three levels, and so does allreduce_half (each level's
// allreduce_half, then the leader's 16-bit result broadcast to its host as bytes). allgather
// gathers, bit for bit, on every layout: where every host has the same number of contiguous
// ranks (HostLayout::regular) the host blocks line up in the output; otherwise the leaders
// gather each host's blocks padded to the largest host's count, and each leader places them
// (moving H L blocks between hosts where N would do). reduce-scatter is the all-reduce's
// matching block (the same bits, at the all-reduce's cost), and reduce_scatter_half the
// allreduce_half's. kAvg divides the finished sum by N once, on every rank alike, so every rank
// holds the same bits.
//
// Failures: a level that fails aborts the others with its reason, so the ranks waiting there fail
// at once with it instead of at their timeout; errors name the global rank that failed (a
// level's own numbering is translated). The waits are nested: a leader waits among the leaders
// while another host may still be in its first step, and a host's other ranks wait for their
// leader while it waits among the leaders; so the levels' timeouts grow with their place, T for
// the first step within a host, 2T among the leaders, 3T for the step from the leader, and the
// rank nearest the culprit, which waits least, is the one that names it. timeout() is the
// longest, what a caller's wait must allow.
//
// Threads: the *_async calls queue (tcp::WorkQueue) and may come from any thread; the levels'
// blocking forms run on this communicator's thread (or the caller's, for a blocking call with
// nothing queued).
#pragma once

#include <memory>

#include "allreduce/communicator.h"
#include "allreduce/hierarchical/host_layout.h"

namespace gradsync {

struct HierarchyLevels {
  // Over this host's ranks (local_rank of local_size), two of them, each with its own timeout:
  // in_host for the steps before the leaders' (T), from_leader for those after (3T).
  std::shared_ptr<Communicator> in_host;
  std::shared_ptr<Communicator> from_leader;
  // Over the leaders (host of hosts), timeout 2T; null on a rank that is not its host's leader
  // or where there is one host.
  std::shared_ptr<Communicator> between_hosts;
};

std::unique_ptr<Communicator> make_hierarchical_communicator(int rank, HostLayout layout,
                                                             HierarchyLevels levels);

}  // namespace gradsync
