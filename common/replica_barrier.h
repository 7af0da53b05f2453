// A barrier for replicas that run as threads of one process (the `dp` strategy, and tests that
// run N ranks as N threads), with what std::barrier lacks: a timeout that names the replicas
// that never arrived, and abort() so that one failing replica wakes the others with an error
// instead of leaving them blocked forever.
//
// Thread-safe. Each party calls arrive_and_wait() once per phase.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace gradsync {

class ReplicaBarrier {
 public:
  // `what` names the barrier in error messages, e.g. "dp gradient barrier".
  ReplicaBarrier(int parties, std::string what);

  // Blocks until every party has arrived in this phase. Throws gradsync::TimeoutError naming
  // the replicas still missing after `timeout`, or gradsync::Error with the abort reason.
  void arrive_and_wait(int rank, std::chrono::milliseconds timeout);

  // Fails every current and future wait with `reason` (the first reason wins).
  void abort(const std::string& reason);

 private:
  int parties_;
  std::string what_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::uint64_t phase_ = 0;
  int arrived_ = 0;
  std::vector<std::uint64_t> arrivals_;  // per rank: phases arrived at so far
  std::string abort_reason_;
};

}  // namespace gradsync
