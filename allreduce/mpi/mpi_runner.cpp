#include "allreduce/mpi/mpi_runner.h"

#include <algorithm>
#include <iostream>
#include <thread>
#include <vector>

#include "allreduce/mpi/mpi_runtime.h"
#include "common/error.h"

namespace gradsync::mpi {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using tcp::Clock;
using tcp::RingWork;

// Polling MPI_Test: yield for the first kSpin (a small collective's whole life; the yield lets
// oversubscribed ranks on the same core run), then sleep, doubling from kFirstPause to kMaxPause,
// so that a long wait costs the training threads beside it almost no CPU. A sleep delays only the
// next step of MPI's schedule (Open MPI's libnbc advances it inside MPI_Test), by kMaxPause at
// most.
constexpr auto kSpin = microseconds(200);
constexpr auto kFirstPause = microseconds(10);
constexpr auto kMaxPause = microseconds(200);

std::string describe(const Header& h) {
  return "collective #" + std::to_string(h.seq) + " " + describe_operation(h);
}

}  // namespace

std::string describe_operation(const Header& h) {
  const std::string n = std::to_string(h.count) + " floats";
  switch (Op(h.op)) {
    case Op::kAllreduceSum:
      return "allreduce sum of " + n;
    case Op::kAllreduceAvg:
      return "allreduce avg of " + n;
    case Op::kBroadcast:
      return "broadcast of " + n + " from rank " + std::to_string(h.root);
    case Op::kAllgather:
      return "allgather of " + n + " per rank";
    case Op::kBarrier:
      return "barrier";
    case Op::kReduceScatterSum:
      return "reduce_scatter sum of " + n;
    case Op::kReduceScatterAvg:
      return "reduce_scatter avg of " + n;
  }
  return "operation " + std::to_string(h.op) + " on " + n;
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
  if (poll(request, Clock::now() + options_.timeout, nullptr) != Waited::kDone) {
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

void MpiRunner::run(RingWork& work, const Header& mine, const char* call,
                    const std::function<int(MPI_Request*)>& start) {
  started_ = work.seq();
  const auto began = Clock::now();
  const auto deadline = began + options_.timeout;
  MPI_Request request = MPI_REQUEST_NULL;
  if (options_.check_desync) {
    std::vector<Header> all(static_cast<std::size_t>(size_));
    {
      auto held = lock();
      check(MPI_Iallgather(&mine, 4, MPI_INT64_T, all.data(), 4, MPI_INT64_T, comm_, &request),
            me_ + ": " + work.what() + ": MPI_Iallgather of the headers");
    }
    wait(work, request, began, deadline, Phase::kHeaders);
    for (int r = 0; r < size_; ++r) {
      const Header& theirs = all[std::size_t(r)];
      if (theirs == mine) continue;
      throw PeerError(r, reports_.host_of(r), work.what(),
                      "desync: " + me_ + " is in " + describe(mine) + " but rank " +
                          std::to_string(r) + " is in " + describe(theirs));
    }
  }
  {
    auto held = lock();
    check(start(&request), me_ + ": " + work.what() + ": " + call);
  }
  wait(work, request, began, deadline, Phase::kPayload);
  finished_ = work.seq();
}

void MpiRunner::wait(RingWork& work, MPI_Request& request, Clock::time_point began,
                     Clock::time_point deadline, Phase phase) {
  auto last_beat = began;
  const Waited waited = poll(request, deadline, [&](Clock::time_point now) {
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
                                  const std::function<void(Clock::time_point)>& beat) {
  const auto spin_until = Clock::now() + kSpin;
  auto pause = kFirstPause;
  while (true) {
    int done = 0;
    {
      auto held = lock();
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), me_ + ": MPI_Test");
    }
    if (done) return Waited::kDone;
    if (closing_) return Waited::kClosing;
    const auto now = Clock::now();
    if (now >= deadline) return Waited::kTimedOut;
    if (beat) beat(now);
    if (now < spin_until) {
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
