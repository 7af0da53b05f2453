// GlooFailures: how a Gloo communicator's collective fails: the gradsync error it makes of what
// went wrong, and what the rank tells its peers, and learns from them, through the Store:
//
//   <store_prefix>/failed/<rank> = "<kind>\n<first>"   kind: timeout, abort or error; first: where
//                                                      the failure started ("rank 2 timed out
//                                                      after 1000 ms waiting for rank 3 in ...")
//
//   GlooFailures failures(store, rank, options, grace, mesh);
//   catch (const std::exception& e) { failures.fail(work, e); }   // throws the gradsync error
//
// Errors name the collective (its sequence number, operation and size) and, where a wait of ours
// or Gloo's message says it, the peer's rank and address: a timeout is a TimeoutError; a closed or
// reset connection is a PeerError, or a TimeoutError when that peer reported that it had timed
// out first (a peer publishes before it closes its connections); a desync is the PeerError of
// gloo_header_check.h. Reports are best effort and bounded in time: the Store may be gone (rank
// 0's server died), and a failure must never turn into a hang. fail() and fail_desync() run on the
// communicator's thread; publish() from any. Internal to allreduce/gloo/.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "allreduce/gloo/gloo_header_check.h"
#include "allreduce/gloo/gloo_mesh.h"
#include "allreduce/gloo/gloo_options.h"
#include "allreduce/store.h"
#include "allreduce/tcp/work_queue.h"

namespace gradsync::gloo {

class GlooFailures {
 public:
  // `mesh` may be null (one rank: nothing can fail but abort); it must outlive this object.
  GlooFailures(Store& store, int rank, const GlooOptions& options, std::chrono::milliseconds grace,
               GlooMesh* mesh);

  // Turns `failure` (Gloo's exception, or a PeerWaitTimeout of our own waits) into the gradsync
  // error, publishes where the failure started, and closes the connections so that the peers
  // fail now rather than at their deadline. Waits up to the grace period for a peer's report.
  [[noreturn]] void fail(tcp::RingWork& work, const std::exception& failure);

  // Every rank holds the same headers and fails by itself, with the same problem: nothing to
  // wake, so the connections stay open (closing them could cut a header still on its way to a
  // third rank). The report is for a peer that reads end-of-file from us later.
  [[noreturn]] void fail_desync(tcp::RingWork& work, const Desync& desync);

  // Only the first call of this rank publishes: later failures are consequences of it.
  void publish(const std::string& kind, const std::string& first);

 private:
  struct Report {
    std::string kind;   // "timeout", "abort" or "error"
    std::string first;  // where the failure started
  };

  // What `peer` published, waiting up to the grace period for it: a peer publishes before it
  // closes its connections, except when Gloo closed them itself on a timeout a moment before.
  std::optional<Report> peer_report(int peer);
  // The peers that publish no report within the grace period, lowest first.
  std::vector<int> silent_peers();
  std::string key(int rank) const { return prefix_ + "/failed/" + std::to_string(rank); }

  Store& store_;
  const std::string prefix_;
  const int rank_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds grace_;
  const std::string me_;  // "rank 3", for messages
  GlooMesh* const mesh_;
  std::atomic<bool> published_{false};
};

}  // namespace gradsync::gloo
