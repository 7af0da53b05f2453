#include "allreduce/shm/shm_barrier.h"

#include <sched.h>

#include <algorithm>
#include <cstring>

#include "allreduce/collective_kind.h"
#include "allreduce/shm/shm_wait.h"
#include "common/error.h"

namespace gradsync::shm {
namespace {

// A sleeping waiter wakes at least this often to look at its deadline and the awaited process.
constexpr std::chrono::milliseconds kSleepSlice{10};
// How long a waiter spins before it sleeps, when every rank can have a core of its own.
constexpr std::chrono::microseconds kSpinFor{2000};

}  // namespace

std::string ShmBarrier::describe(const Descriptor& d) {
  return "collective #" + std::to_string(d.seq) + " " +
         describe_collective(static_cast<CollectiveKind>(d.op), d.count, d.root);
}

void ShmBarrier::begin(const Descriptor& current) {
  current_ = current;
  RankCell& me = layout_.cell(rank_);
  me.current[current.seq & 1] = current;
  me.started.store(current.seq);
  checked_ = false;
  started_ = Clock::now();
}

void ShmBarrier::sync() {
  RankCell& me = layout_.cell(rank_);
  const std::uint32_t target = me.phase.fetch_add(1, std::memory_order_seq_cst) + 1;
  if (me.sleepers.load(std::memory_order_seq_cst) > 0) futex_wake_all(&me.phase);
  const Clock::time_point deadline = started_ + timeout_;
  for (int k = 0; k < size_; ++k) {
    if (k != rank_) wait_for(k, target, deadline);
  }
  if (!checked_) {
    checked_ = true;
    check_same_collective();
  }
}

void ShmBarrier::wait_for(int k, std::uint32_t target, Clock::time_point deadline) {
  RankCell& them = layout_.cell(k);
  const Header& header = layout_.header();
  // Spin while the peer is likely to come soon: a chunk's copies take 0.1-1 ms, and a futex
  // sleep costs tens to hundreds of microseconds to wake from, at each of two barriers a
  // chunk (measured: a 4000-pause spin halved or worse the bandwidth of 1 MiB allreduces).
  const Clock::time_point spin_until = Clock::now() + (spin_ ? kSpinFor : Clock::duration{});
  Clock::time_point next_liveness = Clock::now() + std::chrono::milliseconds(50);
  unsigned spins = 0;
  while (!reached(them.phase.load(std::memory_order_acquire), target)) {
    if (header.aborted.load(std::memory_order_acquire) != 0) fail_aborted();
    if (closing_) throw Error(describe(current_) + " interrupted: the communicator was destroyed");
    if ((++spins & 255u) != 0 || Clock::now() < spin_until) {
      cpu_relax();
      // A peer that shares this core (other work on the machine, more ranks than cores)
      // gets it at once instead of after our time slice: measured at 1 MiB, N = 2 beside one
      // busy process, 3-5 GB/s with the yield against 0.7-1.9 without; idle, no slower.
      if ((spins & 31u) == 0) sched_yield();
      continue;
    }
    them.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const std::uint32_t seen = them.phase.load(std::memory_order_seq_cst);
    const Clock::time_point now = Clock::now();
    if (!reached(seen, target) && header.aborted.load() == 0 && now < deadline) {
      futex_wait(&them.phase, seen, std::min<Clock::duration>(kSleepSlice, deadline - now));
    }
    them.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (reached(them.phase.load(std::memory_order_acquire), target)) break;
    const Clock::time_point after = Clock::now();
    if (after >= deadline) fail_timed_out(k);
    if (after >= next_liveness) {
      // pid 0: that rank has not finished attaching; the deadline decides for it.
      const int pid = them.pid.load();
      if (pid != 0 && !process_alive(pid)) fail_dead(k);
      next_liveness = after + std::chrono::milliseconds(50);
    }
  }
}

void ShmBarrier::check_same_collective() {
  const Descriptor mine = layout_.cell(rank_).current[current_.seq & 1];
  for (int k = 0; k < size_; ++k) {
    const Descriptor theirs = layout_.cell(k).current[current_.seq & 1];
    if (k == rank_ || theirs == mine) continue;
    const std::string what = describe(mine);
    fail(PeerError(k, pid_text(k), what,
                   "desync: rank " + std::to_string(rank_) + " is in " + what + " but rank " +
                       std::to_string(k) + " is in " + describe(theirs)));
  }
}

std::string ShmBarrier::pid_text(int k) const {
  return "shm, pid " + std::to_string(layout_.cell(k).pid.load());
}

void ShmBarrier::fail_timed_out(int k) {
  const RankCell& them = layout_.cell(k);
  fail(TimeoutError(k, pid_text(k), describe(current_),
                    "did not reach it within " + seconds_text(timeout_) +
                        " (its last collective started #" + std::to_string(them.started.load()) +
                        ", finished #" + std::to_string(them.finished.load()) + ")"));
}

void ShmBarrier::fail_dead(int k) {
  fail(PeerError(k, pid_text(k), describe(current_),
                 "its process exited (killed?) before reaching the collective"));
}

void ShmBarrier::fail_aborted() {
  const Header& h = layout_.header();
  // The reason follows the flag at once; a moment's spin covers the window between them.
  for (int i = 0; i < 100000 && h.aborted.load(std::memory_order_acquire) != 2; ++i) {
    cpu_relax();
  }
  if (h.aborted.load() != 2) {
    throw PeerError("another rank", -1, "shm", describe(current_), "another rank aborted");
  }
  const std::string reason(h.reason, strnlen(h.reason, kReasonBytes));
  const int by = h.culprit >= 0 ? h.culprit : h.aborted_by;
  throw PeerError(by, pid_text(by), describe(current_), reason);
}

void ShmBarrier::mark_aborted(const std::string& reason, int culprit) {
  if (!layout_.mapped()) return;
  Header& h = layout_.header();
  std::uint32_t expected = 0;
  if (h.aborted.compare_exchange_strong(expected, 1)) {
    h.aborted_by = rank_;
    h.culprit = culprit;
    const std::size_t n = std::min(reason.size(), kReasonBytes - 1);
    std::memcpy(h.reason, reason.data(), n);
    h.reason[n] = '\0';
    h.aborted.store(2, std::memory_order_release);
  }
  for (int r = 0; r < size_; ++r) futex_wake_all(&layout_.cell(r).phase);
}

}  // namespace gradsync::shm
