// The ranks' meeting points in an shm segment (shm_layout.h), and how a collective fails there:
// ShmCommunicator's barriers, its desync check and its failure verdicts.
//
//   ShmBarrier barrier(rank, size, timeout, spin);
//   barrier.attach(layout);                  // once the segment is mapped
//   barrier.begin({seq, count, op, root});   // entering a collective: its deadline starts now
//   barrier.sync();                          // every rank's counter reaches ours: the next stage
//   barrier.finish(seq);
//
// sync() raises this rank's counter and waits for every other rank's to reach it: spinning
// first (yielding every few dozen turns) when every rank can have a core, then sleeping on the
// rank's futex in short slices that look at the deadline, the abort record and whether the
// awaited process still lives. The first sync() of a collective checks that every rank said the
// same collective. A failure (desync, a rank past the deadline, a dead process) is recorded in
// the segment's abort record, so that every other rank fails at once with the same reason, and
// thrown as a PeerError or TimeoutError naming the rank. Internal to allreduce/shm/.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "allreduce/shm/shm_layout.h"
#include "allreduce/tcp/work_queue.h"

namespace gradsync::shm {

class ShmBarrier {
 public:
  using Clock = tcp::Clock;

  // `spin`: spin before sleeping (every rank of the host can have a core).
  ShmBarrier(int rank, int size, std::chrono::milliseconds timeout, bool spin)
      : rank_(rank), size_(size), timeout_(timeout), spin_(spin) {}

  void attach(const ShmLayout& layout) { layout_ = layout; }

  // This rank enters `current`; the first sync() after it checks that every rank entered the
  // same collective. Its deadline is the timeout from now.
  void begin(const Descriptor& current);
  // Raises this rank's counter, then waits until every rank's has reached it (see above).
  void sync();
  // The collective `seq` is done on this rank (a peer that times out quotes it).
  void finish(std::uint64_t seq) { layout_.cell(rank_).finished.store(seq); }

  // Records `reason` (blaming rank `culprit`) unless a reason is there already, and wakes every
  // sleeper: the other ranks fail with it at once.
  void mark_aborted(const std::string& reason, int culprit);
  // A collective still waiting fails within a sleep slice: the communicator is going.
  void close() { closing_ = true; }

  // "collective #7 allreduce of 1000 floats".
  static std::string describe(const Descriptor& d);

 private:
  void wait_for(int k, std::uint32_t target, Clock::time_point deadline);
  void check_same_collective();
  std::string pid_text(int k) const;
  [[noreturn]] void fail_timed_out(int k);
  [[noreturn]] void fail_dead(int k);
  [[noreturn]] void fail_aborted();
  // This rank's verdict: recorded in the segment, then thrown.
  template <typename E>
  [[noreturn]] void fail(const E& error) {
    mark_aborted(error.what(), error.rank());
    throw error;
  }

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const bool spin_;
  ShmLayout layout_;
  Descriptor current_;
  bool checked_ = false;
  Clock::time_point started_;
  std::atomic<bool> closing_{false};
};

}  // namespace gradsync::shm
