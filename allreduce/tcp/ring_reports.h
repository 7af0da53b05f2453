// What a failing TcpRing rank tells the others, and learns from them, through the Store.
//
//   <prefix>/report/<rank> = "started=<s> finished=<f>"  published when a collective times out;
//                                                         the last sequence numbers this rank
//                                                         started and finished
//   <prefix>/error/<rank>  = the rank's one-line error    published on any failure, before the
//                                                         rank shuts its links down
//
// A rank that times out publishes its report, then collects the others' for a grace period, so
// that its message says what every rank was doing. A rank whose neighbour closed the connection
// looks for that neighbour's error, so that a failure cascading around the ring still names
// where it started. All of it is best effort and bounded in time: the Store may be gone (rank 0
// died), and a failure must never turn into a hang.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "allreduce/store.h"

namespace gradsync::tcp {

class RingReports {
 public:
  RingReports(Store& store, std::string prefix, int rank, int size)
      : store_(store), prefix_(std::move(prefix)), rank_(rank), size_(size) {}

  void publish_report(std::uint64_t started, std::uint64_t finished);
  void publish_error(const std::string& message);
  // "rank 0 12/11, rank 1 12/11, rank 2 no report, ..." waiting up to `grace` for missing ones.
  std::string collect_reports(std::uint64_t started, std::uint64_t finished,
                              std::chrono::milliseconds grace);
  // "(it failed first: <its error>)" if `peer` published one, else "(process died?)".
  std::string peer_failure_note(int peer);

 private:
  std::string key(const char* kind, int rank) const;
  // Sets a key only if the store answers a quick read first: Store::set has no timeout of its
  // own, and a dead TcpStore server would hold it for the store's whole connect timeout.
  void publish(const std::string& key, const std::string& value);

  Store& store_;
  const std::string prefix_;
  const int rank_;
  const int size_;
};

}  // namespace gradsync::tcp
