#include "allreduce/gloo/gloo_failures.h"

#include <algorithm>
#include <vector>

#include "allreduce/gloo/gloo_messages.h"
#include "allreduce/progress_report.h"
#include "allreduce/gloo/gloo_waits.h"
#include "common/error.h"

namespace gradsync::gloo {
namespace {

constexpr std::chrono::milliseconds kStoreProbe{250};  // as the other backends' reports probe

}  // namespace

GlooFailures::GlooFailures(Store& store, int rank, const GlooOptions& options,
                           std::chrono::milliseconds grace, GlooMesh* mesh)
    : store_(store),
      prefix_(options.store_prefix),
      rank_(rank),
      timeout_(options.timeout),
      grace_(grace),
      me_("rank " + std::to_string(rank)),
      mesh_(mesh) {}

void GlooFailures::fail(tcp::RingWork& work, const std::exception& failure) {
  const std::string operation = work.what();
  const std::string gloo = without_source_prefix(failure.what());
  const auto* own_wait = dynamic_cast<const PeerWaitTimeout*>(&failure);
  const int peer = own_wait ? own_wait->peer : mesh_ ? mesh_->peer_named_in(gloo) : -1;
  const std::string them = peer >= 0 ? "rank " + std::to_string(peer) : "";
  const std::string endpoint = peer >= 0 && mesh_ ? mesh_->endpoint(peer) : "";
  const auto timeout_error = [&](const std::string& problem) {
    return peer_error<TimeoutError>(peer, endpoint, operation, problem);
  };
  const auto peer_failure = [&](const std::string& problem) {
    return peer_error<PeerError>(peer, endpoint, operation, problem);
  };
  const std::string timed_out =
      me_ + " timed out after " + std::to_string(timeout_.count()) + " ms";
  std::string kind = "error";
  std::string first;
  std::exception_ptr thrown;
  if (own_wait != nullptr) {
    // Our own waits (the header check, the reduce-scatter ring) say whom they waited for, and
    // why: "waiting for rank 2 to send its header for this collective". That is the verdict
    // already: a wait() that gives up while the Store is published to throws it too.
    kind = "timeout";
    first = timed_out + " in " + operation + ", " + gloo;
    thrown = timeout_error(timed_out + " " + gloo);
    work.mark_failing(thrown);
  } else if (is_gloo_timeout(gloo) && peer < 0 && mesh_) {
    // Gloo's own collectives time out without naming the peer they waited for. Every rank
    // still alive times out too, and says so, within about the same time: the ranks that say
    // nothing within the grace period are the ones stopped or hung.
    kind = "timeout";
    first = timed_out + " in " + operation;
    // If the reports cannot be read in time, it is the Store that did not answer: its host,
    // rank 0, is the one stopped (the caller's wait then gives up with this error).
    const int host = rank_ == 0 ? -1 : 0;
    work.mark_failing(peer_error<TimeoutError>(
        host, host == 0 ? mesh_->endpoint(0) : "", operation,
        timed_out + " (" + gloo + "); the ranks' reports did not come in time (the Store, on "
                                  "rank 0, did not answer: rank 0 stopped or hung?)"));
    publish(kind, first);
    const std::vector<int> silent = silent_peers();
    if (silent.empty()) {
      thrown = timeout_error(timed_out + " (" + gloo + "); every rank reported a failure");
    } else {
      std::string names;
      for (const int r : silent) {
        names += (names.empty() ? "rank " : ", rank ") + std::to_string(r);
      }
      thrown = peer_error<TimeoutError>(
          silent.front(), mesh_->endpoint(silent.front()), operation,
          timed_out + " (" + gloo + "); " + names + " reported nothing within " +
              seconds_text(grace_) + " (stopped or hung?)");
    }
  } else if (is_gloo_timeout(gloo)) {
    kind = "timeout";
    first = timed_out + " waiting for " + (peer >= 0 ? them : "a peer") + " in " + operation;
    thrown = timeout_error(timed_out + " (" + gloo + ")");
  } else if (peer >= 0) {
    // Closed, reset, or a read error: the peer failed or left. Its report says why, and
    // whether it timed out first, which makes ours a timeout too.
    work.mark_failing(peer_failure(them + " closed the connection (" + gloo + ")"));
    const auto report = peer_report(peer);
    if (report) {
      kind = report->kind == "timeout" ? "timeout" : "error";
      first = report->first;
      const std::string problem = them + " closed the connection after " +
                                  (kind == "timeout" ? "a timeout: " : "a failure: ") + first;
      thrown = kind == "timeout" ? timeout_error(problem) : peer_failure(problem);
    } else {
      first = them + " closed the connection to " + me_ + " in " + operation;
      thrown = peer_failure(them + " closed the connection (" + gloo +
                            ") and reported no failure within " + seconds_text(grace_) +
                            ": did its process die?");
    }
  } else {
    first = me_ + " in " + operation + ": gloo: " + gloo;
    thrown = peer_failure("gloo: " + gloo);
  }
  publish(kind, first);
  if (mesh_) mesh_->close();
  std::rethrow_exception(thrown);
}

void GlooFailures::fail_desync(tcp::RingWork& work, const Desync& desync) {
  const std::string operation = work.what();
  publish("error", me_ + " in " + operation + ": " + desync.problem);
  throw PeerError(desync.peer, mesh_ ? mesh_->endpoint(desync.peer) : "", operation,
                  desync.problem);
}

void GlooFailures::publish(const std::string& kind, const std::string& first) {
  if (published_.exchange(true)) return;
  // Store::set has no timeout of its own: with rank 0 (the Store's host) stopped it would hold
  // this thread, and the communicator's destruction after it, for good. A quick read first
  // says whether the Store answers. Without it (no Store, or one rank) the peers say "reported
  // no failure" instead.
  if (mesh_ != nullptr) {
    publish_if_reachable(store_, mesh_->names_key(rank_), key(rank_), kind + "\n" + first,
                         kStoreProbe);
    return;
  }
  try {
    store_.set(key(rank_), kind + "\n" + first);
  } catch (const std::exception&) {
  }
}

std::vector<int> GlooFailures::silent_peers() {
  const auto deadline = std::chrono::steady_clock::now() + grace_;
  std::vector<int> silent;
  for (int r = 0; r < mesh_->size(); ++r) {
    if (r == rank_) continue;
    const auto left = std::max(std::chrono::milliseconds(0),
                               std::chrono::duration_cast<std::chrono::milliseconds>(
                                   deadline - std::chrono::steady_clock::now()));
    try {
      store_.get(key(r), left);
    } catch (const std::exception&) {
      silent.push_back(r);  // no report by the deadline (or no Store: then every peer is)
    }
  }
  return silent;
}

std::optional<GlooFailures::Report> GlooFailures::peer_report(int peer) {
  std::string value;
  try {
    value = store_.get(key(peer), grace_);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const auto newline = value.find('\n');
  if (newline == std::string::npos) return Report{"error", value};
  return Report{value.substr(0, newline), value.substr(newline + 1)};
}

}  // namespace gradsync::gloo
