// MpiRunner's polled path (mpi_runner.h), for an MPI that gives MPI_THREAD_SERIALIZED but not
// MULTIPLE: each collective starts as a non-blocking MPI call under mpi::lock(), and the
// communicator's thread polls MPI_Test until it completes, watching the deadline between tests.
// Also how a runner waits for its MPI_Comm_idup, whatever the thread level.
#include <sys/prctl.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "allreduce/mpi/mpi_runner.h"
#include "allreduce/mpi/mpi_runtime.h"

namespace gradsync::mpi {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;
using tcp::Clock;
using tcp::RingWork;

// Polling MPI_Test. Open MPI moves a non-blocking collective's bytes only inside MPI calls: ob1
// reads and writes its TCP sockets in opal_progress, and libnbc starts each round of its
// schedule in MPI_Test. So every pause between two MPI_Tests is a pause in the transfer (once
// the kernel's socket buffers are full or empty), paid at each of the collective's 2(N-1) or
// more rounds. The thread therefore spins (MPI_Test, then a yield, so that oversubscribed ranks
// on the same core still run) for as long as the collective can be expected to take: kSpin,
// plus kSpinPerByte for each byte this rank moves (2 ns: a transfer at 500 MB/s or more spins to
// the end), and on, kSpin past any MPI_Test that took kBusyTest or more (it moved data: the
// peers are there and the transfer is under way). The cost: one core busy for the whole of a
// collective, as a blocking MPI_Allreduce keeps it busy, taken from whatever computes beside it
// (backward, when buckets overlap). A collective that outlasts the spinning (a late or stopped
// peer, or a transfer slower than 500 MB/s whose MPI_Tests find nothing to move) sleeps between
// MPI_Tests, doubling from kFirstPause to kMaxPause, so that a long wait costs the training
// threads almost no CPU, and each such sleep delays the transfer by up to kMaxPause; its first
// MPI_Test that moves data brings the spinning back. The thread's timer slack is 1 ns (prctl):
// Linux's default 50 us would come on top of every sleep. On the 2-core VM at 2 ranks over TCP
// this took 1 MiB allreduces from 0.5 to 2.1-2.4 GB/s busbw, 4 MiB from 0.7 to 1.5-1.9, and left
// 64 MiB where it was (docs/benchmarks.md).
constexpr auto kSpin = microseconds(200);
constexpr auto kSpinPerByte = nanoseconds(2);
constexpr auto kBusyTest = microseconds(5);
constexpr auto kFirstPause = microseconds(10);
constexpr auto kMaxPause = microseconds(200);

// Sleeps of a few microseconds are what the polling makes; without this each one overruns by
// the default timer slack (50 us). For the calling thread (the communicator's own) only.
void tighten_timer_slack() {
  thread_local const bool done = [] {
    ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);  // best effort: the default still works
    return true;
  }();
  (void)done;
}

}  // namespace

nanoseconds MpiRunner::spin_for(std::uint64_t bytes) {
  constexpr auto kLongest = std::chrono::duration_cast<nanoseconds>(std::chrono::seconds(10));
  const auto limit = std::uint64_t(kLongest.count() / kSpinPerByte.count());
  return kSpin + kSpinPerByte * std::int64_t(std::min(bytes, limit));
}

bool MpiRunner::start_unless_closing(RingWork& work, const std::string& call,
                                     const std::function<int(MPI_Request*)>& start,
                                     MPI_Request& request) {
  // Under start_mutex_, so that close() either comes before (nothing starts: the collective
  // fails, and the job goes on) or after (it is in flight: a wait that sees closing_ ends the
  // job, as MPI may still write into its buffers).
  std::lock_guard guard(start_mutex_);
  if (closing_) return false;
  auto held = lock();
  check(start(&request), me_ + ": " + work.what() + ": " + call);
  return true;
}

void MpiRunner::run_polled(RingWork& work, const Header& mine, std::uint64_t bytes,
                           const MpiCall& call) {
  tighten_timer_slack();
  const auto destroyed = [&] {
    return Error(me_ + ": " + work.what() + " never ran: the communicator was destroyed");
  };
  const auto began = Clock::now();
  const auto deadline = began + options_.timeout;
  MPI_Request request = MPI_REQUEST_NULL;
  // Whichever MPI call comes first decides: before it, close() means this collective never ran;
  // after it, the collective is in flight on every rank that reached it, and must finish or end
  // the job.
  if (options_.check_desync) {
    std::vector<Header> all(static_cast<std::size_t>(size_));
    const auto exchange = [&](MPI_Request* r) {
      return MPI_Iallgather(&mine, 4, MPI_INT64_T, all.data(), 4, MPI_INT64_T, comm_, r);
    };
    if (!start_unless_closing(work, "MPI_Iallgather of the headers", exchange, request)) {
      throw destroyed();
    }
    wait(work, request, began, deadline, spin_for(0), Phase::kHeaders);
    if (std::any_of(all.begin(), all.end(), [&](const Header& h) { return !(h == mine); })) {
      throw desync_error(all, rank_, work.what(), [&](int r) { return reports_.host_of(r); });
    }
    if (call.start) {
      // In flight already: the others are starting the payload, so a close() now ends the job
      // (in wait) rather than leaving them in it until their timeout.
      auto held = lock();
      check(call.start(&request), me_ + ": " + work.what() + ": " + call.start_name);
    }
  } else if (call.start && !start_unless_closing(work, call.start_name, call.start, request)) {
    throw destroyed();
  }
  if (call.start) wait(work, request, began, deadline, spin_for(bytes), Phase::kPayload);
}

void MpiRunner::wait(RingWork& work, MPI_Request& request, Clock::time_point began,
                     Clock::time_point deadline, nanoseconds spin, Phase phase) {
  auto last_beat = began;
  const Waited waited = poll(request, deadline, spin, [&](Clock::time_point now) {
    if (now - began < heartbeat_ || now - last_beat < heartbeat_) return;
    reports_.publish_progress({started_, finished_});
    last_beat = now;
  });
  if (waited == Waited::kTimedOut) throw end_job_timed_out(work, phase);
  if (waited == Waited::kClosing) throw end_job_destroyed(work);
}

MpiRunner::Waited MpiRunner::poll(MPI_Request& request, Clock::time_point deadline,
                                  nanoseconds spin,
                                  const std::function<void(Clock::time_point)>& beat) {
  auto spin_until = Clock::now() + spin;
  auto pause = kFirstPause;
  while (true) {
    int done = 0;
    Clock::time_point before, after;
    {
      auto held = lock();
      before = Clock::now();
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), me_ + ": MPI_Test");
      after = Clock::now();
    }
    if (done) return Waited::kDone;
    if (closing_) return Waited::kClosing;
    if (after >= deadline) return Waited::kTimedOut;
    if (beat) beat(after);
    if (after - before >= kBusyTest) {
      // This MPI_Test moved data: the transfer is under way, keep up with it.
      spin_until = std::max(spin_until, after + kSpin);
      pause = kFirstPause;
    }
    if (after < spin_until) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, kMaxPause);
  }
}

}  // namespace gradsync::mpi
