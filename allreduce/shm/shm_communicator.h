// ShmCommunicator: the Communicator for ranks on one host, through one shared-memory segment
// (comm.backend: shm), as NCCL's SHM transport and Open MPI's vader move bytes between the
// processes of a node without the kernel's TCP stack.
//
// Allreduce, chunk by chunk (`chunk_bytes` of the buffer at a time, two chunks in flight):
//   1. each rank copies its chunk into its own slot of the segment, all but its own slice
//   2. barrier
//   3. rank r sums slice r of the chunk over every slot, in rank order (its own values read
//      from its input), into the result area and its output (each element summed once, by
//      one rank: every rank ends with the same bits)
//   4. barrier
//   5. each rank copies the rest of the result out
// Every rank thus moves (N-1)/N of the buffer in and out once, and sums 1/N of it: its own
// slice is read by no other rank, so it never passes through the segment. The slots and
// result area come in two sets used alternately, so step 1 of chunk c + 1 never waits for the
// copies out of chunk c: a set is reused only after every rank has passed the next chunk's
// first barrier. Broadcast, allgather and reduce-scatter take one barrier per chunk.
// kAvg divides the finished sum by N once, as the ring does. allreduce_half runs the same steps
// on 16-bit values (a chunk holds twice as many): rank r adds slice r of every slot in fp32, in
// rank order, and rounds to 16 bits once. reduce_scatter_half is the reduce-scatter's steps with
// that arithmetic, so each block is the allreduce_half's block bit for bit.
//
// Barriers: each rank owns a counter (phase) in the segment; it passes a barrier by raising it
// and waiting until every other rank's has reached the same value: a short spin, then a futex
// sleep (allreduce/shm/shm_wait.h) in slices that also look at the deadline, an abort flag and
// whether the awaited rank's process is still alive; the spin yields the core every few dozen
// turns, so a peer waiting for this core runs at once. So a collective never waits past
// `timeout`: it fails naming the rank that did not arrive (TimeoutError) or the rank whose
// process died (PeerError), and marks the segment aborted so every other rank fails at once with
// the same reason. At its first barrier each collective compares the ranks' (sequence number,
// operation, count, root): a mismatch is a desync error naming both.
//
// Set-up (collective, through the Store): rank 0 creates the segment ("/gradsync-<run id>-..."),
// publishes its name; the others map it and say so; rank 0 then removes the name, so nothing is
// left in /dev/shm whatever happens to the ranks later (allreduce/shm/shm_segment.h). Every
// rank must be on this host: their host ids (hostname and boot id) are compared, and a rank
// elsewhere fails the set-up naming it.
//
// Threads: the *_async calls queue (tcp::WorkQueue, as TcpRing and Gloo) and may come from any
// thread; one background thread per communicator runs the collectives. The destructor marks
// nothing aborted: after a failure the segment is; otherwise every collective completed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "allreduce/communicator.h"
#include "allreduce/store.h"

namespace gradsync {

struct ShmOptions {
  std::chrono::milliseconds timeout{60000};  // comm.timeout_s: set-up and every collective
  std::string store_prefix = "gradsync/shm";
  // Of the buffer per slot and step: 2 (N + 1) of them. 512 KiB measured ahead of 256 KiB at N = 4
  // from 1 to 16 MiB (1.2-1.4x) and level at N = 2; 1 MiB chunks lose from 4 MiB up (L2).
  std::size_t chunk_bytes = 512u << 10;
  std::uint64_t run_id = 0;              // names the segment, so the launcher can find leftovers
  // Ranks that may be busy on this machine's cores, this communicator's and others' (a
  // hierarchical run's other simulated hosts); 0: this communicator's size. A wait spins
  // before it sleeps only when every one of them can have a core.
  int machine_ranks = 0;
};

// Blocks until every rank has mapped the segment (or `options.timeout` passes). The Store must
// outlive the call.
std::unique_ptr<Communicator> make_shm_communicator(Store& store, int rank, int size,
                                                    const ShmOptions& options);

}  // namespace gradsync
