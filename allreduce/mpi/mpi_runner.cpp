#include "allreduce/mpi/mpi_runner.h"

#include <sys/prctl.h>

#include <algorithm>
#include <iostream>
#include <thread>
#include <vector>

#include "allreduce/mpi/mpi_runtime.h"

namespace gradsync::mpi {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
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

// How long a collective moving `bytes` polls without sleeping, at least.
nanoseconds spin_for(std::uint64_t bytes) {
  constexpr auto kLongest = std::chrono::duration_cast<nanoseconds>(std::chrono::seconds(10));
  const auto limit = std::uint64_t(kLongest.count() / kSpinPerByte.count());
  return kSpin + kSpinPerByte * std::int64_t(std::min(bytes, limit));
}

// Sleeps of a few microseconds are what the polling makes; without this each one overruns by
// the default timer slack (50 us). For the calling thread (the communicator's own) only.
void tighten_timer_slack() {
  thread_local const bool done = [] {
    ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);  // best effort: the default still works
    return true;
  }();
  (void)done;
}

std::string describe(const Header& h) {
  return "collective #" + std::to_string(h.seq) + " " + describe_operation(h);
}

// "rank 3", "ranks 0, 1, 2".
std::string rank_names(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  return text;
}

}  // namespace

std::string describe_operation(const Header& h) {
  return describe_collective(CollectiveKind(h.op), std::uint64_t(h.count), int(h.root));
}

PeerError desync_error(const std::vector<Header>& all, int me, const std::string& operation,
                       const std::function<std::string(int)>& host_of) {
  // The ranks grouped by the header they sent, in the order of each group's lowest rank, then
  // stably by size: the largest group first, the lowest ranks first among equals.
  struct Group {
    Header header;
    std::vector<int> ranks;
  };
  std::vector<Group> groups;
  for (int r = 0; r < int(all.size()); ++r) {
    const auto same = std::find_if(groups.begin(), groups.end(),
                                   [&](const Group& g) { return g.header == all[std::size_t(r)]; });
    if (same == groups.end()) {
      groups.push_back({all[std::size_t(r)], {r}});
    } else {
      same->ranks.push_back(r);
    }
  }
  GRADSYNC_CHECK(groups.size() >= 2, "desync_error: every rank sent the same header");
  std::stable_sort(groups.begin(), groups.end(),
                   [](const Group& a, const Group& b) { return a.ranks.size() > b.ranks.size(); });
  const auto in = [](const Group& g) {
    return rank_names(g.ranks) + (g.ranks.size() == 1 ? " is in " : " are in ") +
           describe(g.header);
  };
  std::string problem = "desync: ";
  std::vector<int> blamed;
  if (groups[0].ranks.size() > groups[1].ranks.size()) {
    // The majority is the collective the job is in; every other rank is out of step.
    for (std::size_t g = 1; g < groups.size(); ++g) {
      problem += in(groups[g]) + ", ";
      blamed.insert(blamed.end(), groups[g].ranks.begin(), groups[g].ranks.end());
    }
    problem += "but the majority (" + rank_names(groups[0].ranks) + ") is in " +
               describe(groups[0].header);
  } else {
    // No side outnumbers the others: name every side, and blame those that are not this one.
    problem += "no majority: ";
    for (std::size_t g = 0; g < groups.size(); ++g) {
      problem += (g == 0 ? "" : ", ") + in(groups[g]);
      const auto& ranks = groups[g].ranks;
      if (std::find(ranks.begin(), ranks.end(), me) == ranks.end()) {
        blamed.insert(blamed.end(), ranks.begin(), ranks.end());
      }
    }
  }
  std::sort(blamed.begin(), blamed.end());
  if (blamed.size() == 1) return PeerError(blamed[0], host_of(blamed[0]), operation, problem);
  std::vector<std::string> hosts;  // each once, in rank order
  for (const int r : blamed) {
    std::string host = host_of(r);
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end())
      hosts.push_back(std::move(host));
  }
  std::string endpoint;
  for (const std::string& host : hosts) endpoint += (endpoint.empty() ? "" : ", ") + host;
  return PeerError(rank_names(blamed), blamed[0], endpoint, operation, problem);
}

MpiRunner::MpiRunner(Store& store, int rank, int size, const MpiOptions& options)
    : rank_(rank),
      size_(size),
      options_(options),
      grace_(std::min(options.timeout, milliseconds(2000))),
      // Within half the grace period of reaching a slow collective, every rank has said so.
      heartbeat_(std::max(milliseconds(1), std::min(grace_ / 2, milliseconds(500)))),
      me_("rank " + std::to_string(rank)),
      reports_(store, options.store_prefix, rank, size) {
  char host[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  {
    auto held = lock();
    check(MPI_Get_processor_name(host, &length), me_ + ": MPI_Get_processor_name");
  }
  reports_.join(std::string(host, std::size_t(length)), options_.timeout);
  MPI_Request request = MPI_REQUEST_NULL;
  {
    auto held = lock();
    check(MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &request), me_ + ": MPI_Comm_idup");
  }
  // Every rank reached the Store's join: one that stalls now stalls inside MPI.
  if (poll(request, Clock::now() + options_.timeout, spin_for(0), nullptr) != Waited::kDone) {
    end_job(me_ + " timed out after " + std::to_string(options_.timeout.count()) +
            " ms in MPI_Comm_idup, which every rank had reached");
    throw TimeoutError(rank_, "mpi", "MPI_Comm_idup", "timed out");
  }
  auto held = lock();
  check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), me_ + ": MPI_Comm_set_errhandler");
}

MpiRunner::~MpiRunner() {
  try {
    auto held = lock();
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  } catch (const std::exception&) {
    // MPI was finalised first (a communicator left alive at exit): nothing to free.
  }
}

void MpiRunner::close() {
  std::lock_guard held(start_mutex_);
  closing_ = true;
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

void MpiRunner::run(RingWork& work, const Header& mine, std::uint64_t bytes, const char* call,
                    const std::function<int(MPI_Request*)>& start) {
  tighten_timer_slack();
  const auto destroyed = [&] {
    return Error(me_ + ": " + work.what() + " never ran: the communicator was destroyed");
  };
  started_ = work.seq();
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
    if (start) {
      // In flight already: the others are starting the payload, so a close() now ends the job
      // (in wait) rather than leaving them in it until their timeout.
      auto held = lock();
      check(start(&request), me_ + ": " + work.what() + ": " + call);
    }
  } else if (start && !start_unless_closing(work, call, start, request)) {
    throw destroyed();
  }
  if (start) wait(work, request, began, deadline, spin_for(bytes), Phase::kPayload);
  finished_ = work.seq();
}

void MpiRunner::wait(RingWork& work, MPI_Request& request, Clock::time_point began,
                     Clock::time_point deadline, nanoseconds spin, Phase phase) {
  auto last_beat = began;
  const Waited waited = poll(request, deadline, spin, [&](Clock::time_point now) {
    if (now - began < heartbeat_ || now - last_beat < heartbeat_) return;
    reports_.publish_progress({started_, finished_});
    last_beat = now;
  });
  if (waited == Waited::kTimedOut) timed_out(work, phase);
  if (waited == Waited::kClosing) {
    end_job(me_ + ": the communicator was destroyed while " + work.what() + " was running");
    throw Error(me_ + ": " + work.what() + " interrupted: the communicator was destroyed");
  }
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

// Names the ranks that never reached this collective (in the header exchange, those whose last
// word is older), in one line, and ends the job.
void MpiRunner::timed_out(RingWork& work, Phase phase) {
  work.mark_failing();
  const Progress mine{started_, finished_};
  reports_.publish_progress(mine);
  const auto all = reports_.collect(mine, work.seq(), grace_);
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    const auto& p = all[std::size_t(r)];
    if (r != rank_ && (!p || p->started < work.seq())) missing.push_back(r);
  }
  const std::string waited =
      me_ + " timed out after " + std::to_string(options_.timeout.count()) + " ms";
  std::string problem;
  if (phase == Phase::kPayload && options_.check_desync) {
    // Every header arrived, so every rank reached it; one that finished early has no fresh
    // report, so the reports cannot tell who stopped.
    missing.clear();
    problem = waited +
              " in MPI's collective, which every rank had reached (a rank stopped "
              "inside it?)";
  } else if (missing.empty()) {
    problem = waited + "; every rank reported reaching this collective";
  } else {
    std::string names;
    for (const int r : missing) names += (names.empty() ? "rank " : ", rank ") + std::to_string(r);
    problem = waited + " waiting for " + names + ", which never reached it";
  }
  problem += "; last started/finished: " + MpiReports::describe(all);
  const TimeoutError error =
      missing.empty()
          ? TimeoutError("a peer", -1, "mpi", work.what(), problem)
          : TimeoutError(missing.front(), reports_.host_of(missing.front()), work.what(), problem);
  end_job(error.what());
  throw error;
}

void MpiRunner::abort(const std::string& reason) {
  reports_.publish_abort(reason);
  end_job(me_ + " aborted the job: " + reason);
}

void MpiRunner::end_job(const std::string& message) {
  std::cerr << ("gradsync: error: " + message + " (mpi: MPI_Abort ends every rank)\n")
            << std::flush;
  try {
    auto held = lock();
    MPI_Abort(MPI_COMM_WORLD, 1);
  } catch (const std::exception&) {
    // MPI was finalised: nothing left to abort.
  }
}

}  // namespace gradsync::mpi
