// What MPI cannot say and the Store can: how far each rank got. MPI has no timeout and no way
// to ask which ranks have joined a non-blocking collective, so MpiCommunicator's ranks tell each
// other through the gradsync Store, under "<prefix>/":
//
//   joined/<rank>    = the host's name               set once, when the communicator is made
//   progress/<rank>  = "started=<s> finished=<f>"    the last collective sequence numbers
//   aborted/<rank>   = the reason                    abort(reason), before MPI_Abort
//
// progress/<rank> is published only while a collective is slow: once it has run for the
// heartbeat period, and again every period while it runs, and when it times out. A collective
// that finishes in time (nearly all of them) costs the Store nothing. A rank that times out in
// collective #k publishes, waits up to a grace period for the others, and names as laggards the
// ranks whose last word is older than #k (or who never spoke): they never reached it. The ranks
// that did reach it have run it for longer than the heartbeat by then, so they have spoken.
//
// Best effort and bounded in time, as TcpRing's reports (the text and the probed set are theirs:
// allreduce/progress_report.h): a publish first probes the Store with a short read (Store::set
// has no timeout of its own), collect() never waits for a key that is not there, and nothing
// here throws.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "allreduce/progress_report.h"
#include "allreduce/store.h"

namespace gradsync::mpi {

using Progress = ProgressReport;

class MpiReports {
 public:
  MpiReports(Store& store, std::string prefix, int rank, int size)
      : store_(store), prefix_(std::move(prefix)), rank_(rank), size_(size) {}

  // Sets joined/<rank> to `host`, then waits for every rank's (the Store's TimeoutError names
  // who is missing): ranks meet here before their first MPI collective, which cannot time out.
  void join(const std::string& host, std::chrono::milliseconds timeout);
  // The host `rank` joined from, for messages; "mpi" if the Store does not say at once.
  std::string host_of(int rank);
  // False when the Store did not answer its probe (rank 0, which serves it, stopped or hung).
  bool publish_progress(Progress mine);
  void publish_abort(const std::string& reason);
  // Every rank's last published progress (ours is `mine`); nullopt for a rank that never
  // published. Reads again, for up to `grace` in all, those that have not started collective
  // `seq` yet: a rank that reached it later than this one publishes a little later too. Each
  // round asks the Store which reports exist (never waiting for one) and reads only those, so
  // the call returns within `grace` plus one Store round trip however many ranks are silent.
  std::vector<std::optional<Progress>> collect(Progress mine, std::uint64_t seq,
                                               std::chrono::milliseconds grace);
  // "rank 0 7/6, rank 1 7/6, rank 2 no report".
  static std::string describe(const std::vector<std::optional<Progress>>& all);

 private:
  std::string key(const char* kind, int rank) const;
  bool publish(const std::string& key, const std::string& value);
  // Reads rank r's report if the Store holds one now, answering within `limit`.
  std::optional<Progress> read_if_present(int r, std::chrono::milliseconds limit);

  Store& store_;
  const std::string prefix_;
  const int rank_;
  const int size_;
};

}  // namespace gradsync::mpi
