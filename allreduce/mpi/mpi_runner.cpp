#include "allreduce/mpi/mpi_runner.h"

#include <algorithm>
#include <iostream>
#include <vector>

#include "allreduce/mpi/mpi_runtime.h"

namespace gradsync::mpi {
namespace {

using std::chrono::milliseconds;
using tcp::Clock;
using tcp::RingWork;

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
      blocking_(thread_multiple()),
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
  {
    auto held = lock();
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), me_ + ": MPI_Comm_set_errhandler");
  }
  if (blocking_) {
    watchdog_ = std::make_unique<MpiWatchdog>(
        heartbeat_,
        [this] {
          reports_.publish_progress({started_, finished_});
        },
        [this](MpiWatchdog::Ending ending) { return end_watched(ending); });
  }
}

MpiRunner::~MpiRunner() {
  watchdog_.reset();  // its hooks use the members below
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
  if (watchdog_) watchdog_->close();
}

void MpiRunner::run(RingWork& work, const Header& mine, std::uint64_t bytes, const MpiCall& call) {
  started_ = work.seq();
  if (blocking_) {
    run_blocking(work, mine, call);
  } else {
    run_polled(work, mine, bytes, call);
  }
  finished_ = work.seq();
}

void MpiRunner::run_blocking(RingWork& work, const Header& mine, const MpiCall& call) {
  if (!options_.check_desync && !call.blocking) return;  // no MPI call to make
  const auto began = Clock::now();
  {
    // close() either comes first (nothing starts: the collective fails, the job goes on) or
    // after: the collective is watched, and the watchdog ends the job (MPI may write into its
    // buffers until it returns). The whole collective, headers and payload, is one watch: once
    // the headers went out the others are in it, and a close() must end the job rather than
    // leave them there until their timeout.
    std::lock_guard guard(start_mutex_);
    if (closing_) {
      throw Error(me_ + ": " + work.what() + " never ran: the communicator was destroyed");
    }
    watched_ = &work;
    phase_ = options_.check_desync ? Phase::kHeaders : Phase::kPayload;
    watchdog_->watch(began, began + options_.timeout);
  }
  // No mpi::lock() around the blocking calls: MULTIPLE needs none, and end_job's MPI_Abort
  // takes it, from this runner's watchdog or another thread, while they wait for other ranks.
  std::vector<Header> all(options_.check_desync ? static_cast<std::size_t>(size_) : 0);
  bool desync = false;
  std::exception_ptr failure;
  try {
    if (options_.check_desync) {
      check(MPI_Allgather(&mine, 4, MPI_INT64_T, all.data(), 4, MPI_INT64_T, comm_),
            me_ + ": " + work.what() + ": MPI_Allgather of the headers");
      desync = std::any_of(all.begin(), all.end(), [&](const Header& h) { return !(h == mine); });
      phase_ = Phase::kPayload;
    }
    if (!desync && call.blocking) {
      check(call.blocking(), me_ + ": " + work.what() + ": " + call.name);
    }
  } catch (...) {
    failure = std::current_exception();
  }
  // The watchdog's error first: it has ended the job for this collective. MPI is done with the
  // buffers now, so naming a desync's ranks (Store reads) happens unwatched.
  if (const std::exception_ptr ended = watchdog_->unwatch()) std::rethrow_exception(ended);
  if (failure) std::rethrow_exception(failure);
  if (desync) {
    throw desync_error(all, rank_, work.what(), [&](int r) { return reports_.host_of(r); });
  }
}

// Names the ranks that never reached this collective (in the header exchange, those whose last
// word is older), in one line, and ends the job.
TimeoutError MpiRunner::end_job_timed_out(RingWork& work, Phase phase) {
  const std::string waited =
      me_ + " timed out after " + std::to_string(options_.timeout.count()) + " ms";
  work.mark_failing();
  const Progress mine{started_, finished_};
  if (!reports_.publish_progress(mine) && rank_ != 0) {
    // The Store lives in rank 0's process: when it does not answer, rank 0 is stopped or hung,
    // and no rank's report can be read. Said at once, long before a wait() gives up.
    const TimeoutError error(0, "the store's host", work.what(),
                             waited + "; rank 0, which serves the rendezvous store, does not "
                                      "answer it either (stopped or hung?)");
    end_job(error.what());
    return error;
  }
  const auto all = reports_.collect(mine, work.seq(), grace_);
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    const auto& p = all[std::size_t(r)];
    if (r != rank_ && (!p || p->started < work.seq())) missing.push_back(r);
  }
  std::string names;
  for (const int r : missing) names += (names.empty() ? "rank " : ", rank ") + std::to_string(r);
  std::string problem;
  if (phase == Phase::kPayload && options_.check_desync) {
    // Every header arrived, so every rank reached it. A rank inside a collective this slow
    // publishes its progress every heartbeat (its watchdog's thread does), so one without a
    // word of it has been stopped or hung inside it: SIGSTOP, a debugger, a starved host. (A
    // rank that finished it early and went quiet would look the same; with every rank's
    // contribution in, MPI lets no rank finish while a live one stays stuck for the timeout.)
    problem = waited + " in MPI's collective, which every rank had reached";
    if (!missing.empty()) {
      problem += "; " + names + (missing.size() == 1 ? " has" : " have") +
                 " said nothing since (stopped or hung inside it?)";
    }
  } else if (missing.empty()) {
    problem = waited + "; every rank reported reaching this collective";
  } else {
    problem = waited + " waiting for " + names + ", which never reached it";
  }
  problem += "; last started/finished: " + MpiReports::describe(all);
  const TimeoutError error =
      missing.empty()
          ? TimeoutError("a peer", -1, "mpi", work.what(), problem)
          : TimeoutError(missing.front(), reports_.host_of(missing.front()), work.what(), problem);
  end_job(error.what());
  return error;
}

Error MpiRunner::end_job_destroyed(RingWork& work) {
  end_job(me_ + ": the communicator was destroyed while " + work.what() + " was running");
  return Error(me_ + ": " + work.what() + " interrupted: the communicator was destroyed");
}

std::exception_ptr MpiRunner::end_watched(MpiWatchdog::Ending ending) {
  RingWork& work = *watched_;
  if (ending == MpiWatchdog::Ending::kClosing) {
    return std::make_exception_ptr(end_job_destroyed(work));
  }
  return std::make_exception_ptr(end_job_timed_out(work, phase_));
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
