// MpiRunner: how MpiCommunicator (mpi_communicator.h) runs one collective on its background
// thread, and what it does when MPI cannot finish one: the header exchange that catches a desync,
// the deadline watch, the progress reports that name a laggard (mpi_reports.h), and the end of
// the job (MPI_Abort).
//
//   MpiRunner runner(store, rank, size, options);   // joins: Store, then MPI_Comm_idup
//   runner.run(work, header, bytes, {"MPI_Allreduce", [&] {
//       return MPI_Allreduce(MPI_IN_PLACE, data, n, MPI_FLOAT, MPI_SUM, runner.comm()); },
//     "MPI_Iallreduce", [&](MPI_Request* r) {
//       return MPI_Iallreduce(MPI_IN_PLACE, data, n, MPI_FLOAT, MPI_SUM, runner.comm(), r); }});
//                                                  // returns when done; throws a desync
//
// Each collective comes in both forms, and the thread level MPI gave (mpi_runtime.h) picks one
// for the life of the process. Under MPI_THREAD_MULTIPLE the blocking call runs, without
// mpi::lock(), and the runner's watchdog thread (mpi_watchdog.h) keeps its deadline and
// heartbeat. Why blocking: Open MPI serves blocking collectives from its `tuned` component, as a
// program calling MPI_Allreduce gets, and non-blocking ones from libnbc, with other algorithms
// (half the speed at some sizes, docs/benchmarks.md), and polling adds its own gaps. Under
// MPI_THREAD_SERIALIZED alone the non-blocking call starts under the lock and run() polls
// MPI_Test (mpi_polling.cpp says how it paces itself), watching the deadline between tests. Either
// way a collective past its deadline, or one under way when close() comes, ends the job with the
// same line.
//
// run() is for the communicator's one thread; abort(), close() and end_job() may come from any
// thread. Internal to allreduce/mpi/ (it includes mpi.h).
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "allreduce/collective_kind.h"
#include "allreduce/mpi/mpi_options.h"
#include "allreduce/mpi/mpi_reports.h"
#include "allreduce/mpi/mpi_watchdog.h"
#include "allreduce/tcp/work_queue.h"
#include "common/error.h"

namespace gradsync::mpi {

// What a rank says about the collective it starts (check_desync): the same on every rank unless
// they disagree. op is a CollectiveKind (allreduce/collective_kind.h); count the collective's
// total elements (allgather: the output; reduce_scatter: the input), as TcpRing counts.
struct Header {
  std::int64_t op = 0, count = 0, root = 0, seq = 0;
  bool operator==(const Header&) const = default;
};
static_assert(sizeof(Header) == 32, "four MPI_INT64_T on the wire");

// "allreduce avg of 1000 floats", "broadcast of 10 floats from rank 2", "barrier".
std::string describe_operation(const Header& header);

// The desync error for the headers every rank sent (all[r] is rank r's; at least two differ),
// as rank `me` throws it. The header most ranks sent is the collective the job is in, and the
// ranks that sent another are named: "rank 3 (host) during ...: desync: rank 3 is in
// collective #4 allreduce of 6 floats, but the majority (ranks 0, 1, 2) is in collective #4
// allreduce of 5 floats". With no majority (two ranks, or a tie) every side is named and the
// error blames the first rank outside `me`'s side. host_of(r) names rank r's host.
PeerError desync_error(const std::vector<Header>& all, int me, const std::string& operation,
                       const std::function<std::string(int)>& host_of);

// One collective's payload as both MPI calls, each named for errors: `blocking` runs it to the
// end (MPI_THREAD_MULTIPLE), `start` begins the non-blocking form for polling (SERIALIZED). Both
// empty (zero elements): the header exchange alone.
struct MpiCall {
  const char* name = "";  // "MPI_Allreduce"
  std::function<int()> blocking;
  const char* start_name = "";  // "MPI_Iallreduce"
  std::function<int(MPI_Request*)> start;
};

class MpiRunner {
 public:
  // Collective: every rank meets in the Store (whose TimeoutError names who is missing), then in
  // MPI_Comm_idup of MPI_COMM_WORLD, with MPI_ERRORS_RETURN on the duplicate.
  MpiRunner(Store& store, int rank, int size, const MpiOptions& options);
  ~MpiRunner();
  MpiRunner(const MpiRunner&) = delete;
  MpiRunner& operator=(const MpiRunner&) = delete;

  MPI_Comm comm() const { return comm_; }
  // How long a timed-out rank reads the others' progress: min(timeout, 2 s).
  std::chrono::milliseconds grace() const { return grace_; }

  // The header exchange (options.check_desync: desync_error's PeerError if any differ), then
  // `call`'s payload, blocking or polled (see above); an empty call (zero elements) exchanges
  // the headers alone, so that a rank that issued a 0-element collective where the others issued
  // another is caught in this collective, not the next. Both within options.timeout of the
  // start, else the job ends (see above). `bytes` is what this rank moves, for how long the
  // polling may spin. After close(), a collective not yet started throws "the communicator was
  // destroyed" and starts nothing.
  void run(tcp::RingWork& work, const Header& mine, std::uint64_t bytes, const MpiCall& call);

  // From now on no collective starts, and one still running ends the job (MPI may write into
  // its buffers until it completes): for the communicator's destructor, before it joins the
  // thread. Waits for a start already under way (a polled MPI_I* call, which returns at once;
  // a blocking call is left to the watchdog, which ends the job on its own thread).
  void close();
  // Publishes `reason`, then ends the job.
  void abort(const std::string& reason);
  // One line to stderr ("gradsync: error: <message> ..."), then MPI_Abort: mpirun ends every
  // rank. Returns only if MPI_Abort does (it does not); callers throw after it all the same.
  void end_job(const std::string& message);

 private:
  enum class Waited { kDone, kTimedOut, kClosing };
  enum class Phase { kHeaders, kPayload };

  // MPI_THREAD_MULTIPLE: blocking calls, the watchdog on the clock.
  void run_blocking(tcp::RingWork& work, const Header& mine, const MpiCall& call);
  // MPI_THREAD_SERIALIZED: non-blocking calls, polled (mpi_polling.cpp).
  void run_polled(tcp::RingWork& work, const Header& mine, std::uint64_t bytes,
                  const MpiCall& call);
  // How long a collective moving `bytes` polls without sleeping, at least (mpi_polling.cpp).
  static std::chrono::nanoseconds spin_for(std::uint64_t bytes);
  // Starts a non-blocking call unless close() came first (then false, and nothing started).
  bool start_unless_closing(tcp::RingWork& work, const std::string& call,
                            const std::function<int(MPI_Request*)>& start, MPI_Request& request);
  void wait(tcp::RingWork& work, MPI_Request& request, tcp::Clock::time_point began,
            tcp::Clock::time_point deadline, std::chrono::nanoseconds spin, Phase phase);
  Waited poll(MPI_Request& request, tcp::Clock::time_point deadline, std::chrono::nanoseconds spin,
              const std::function<void(tcp::Clock::time_point)>& beat);
  // How both paths end the job for `work`, each returning the error its thread throws: past the
  // deadline (naming the ranks that never reached the collective), or closed while it ran.
  TimeoutError end_job_timed_out(tcp::RingWork& work, Phase phase);
  Error end_job_destroyed(tcp::RingWork& work);
  // The watchdog's end(): the one of the two for the collective it watches.
  std::exception_ptr end_watched(MpiWatchdog::Ending ending);

  const int rank_;
  const int size_;
  const MpiOptions options_;
  const std::chrono::milliseconds grace_;
  const std::chrono::milliseconds heartbeat_;  // how often a slow collective publishes progress
  const std::string me_;                       // "rank 3", for messages
  const bool blocking_;                        // MPI gave MPI_THREAD_MULTIPLE
  MpiReports reports_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::mutex start_mutex_;  // close() against a start: a collective either starts or never does
  std::atomic<bool> closing_{false};
  std::atomic<std::uint64_t> started_{0}, finished_{0};
  // What the watchdog watches (blocking_): set before watch(), read by end_watched() only while
  // the collective's thread is inside it (unwatch() waits for an end() under way).
  tcp::RingWork* watched_ = nullptr;
  std::atomic<Phase> phase_{Phase::kHeaders};
  std::unique_ptr<MpiWatchdog> watchdog_;  // blocking_ only; made last, stopped first
};

}  // namespace gradsync::mpi
