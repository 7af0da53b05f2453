#include "allreduce/tcp/ring_reports.h"

#include <algorithm>

#include "allreduce/progress_report.h"
#include "allreduce/tcp/socket.h"
#include "common/error.h"

namespace gradsync::tcp {
namespace {

using std::chrono::milliseconds;

// The quick read that checks the store is alive before a set, and the wait for a closed
// neighbour's error (published before it closed, so it is there already if it exists at all).
constexpr milliseconds kProbeTimeout{250};
constexpr milliseconds kPeerErrorTimeout{100};
// Each report still missing after the grace period gets this much more, so that a store that
// answers slowly is not mistaken for a rank that never reported.
constexpr milliseconds kLateReportTimeout{50};

}  // namespace

std::string RingReports::key(const char* kind, int rank) const {
  return prefix_ + "/" + kind + "/" + std::to_string(rank);
}

void RingReports::publish(const std::string& key, const std::string& value) {
  // Our own ring address is always there; the error itself still reaches this rank's caller.
  publish_if_reachable(store_, this->key("addr", rank_), key, value, kProbeTimeout);
}

void RingReports::publish_report(std::uint64_t started, std::uint64_t finished) {
  publish(key("report", rank_), format_progress({started, finished}));
}

void RingReports::publish_error(const std::string& message) {
  publish(key("error", rank_), message);
}

std::string RingReports::collect_reports(std::uint64_t started, std::uint64_t finished,
                                         milliseconds grace) {
  const auto deadline = Clock::now() + grace;
  std::string text;
  for (int r = 0; r < size_; ++r) {
    text += (r == 0 ? "rank " : ", rank ") + std::to_string(r) + " ";
    if (r == rank_) {
      text += std::to_string(started) + "/" + std::to_string(finished);
      continue;
    }
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    try {
      const std::string report = store_.get(key("report", r), std::max(left, kLateReportTimeout));
      if (const auto p = parse_progress(report)) {
        text += std::to_string(p->started) + "/" + std::to_string(p->finished);
      } else {
        text += "unreadable report '" + report + "'";
      }
    } catch (const std::exception&) {
      text += "no report";
    }
  }
  return text;
}

std::string RingReports::peer_failure_note(int peer) {
  try {
    return "(it failed first: " + store_.get(key("error", peer), kPeerErrorTimeout) + ")";
  } catch (const std::exception&) {
    return "(process died?)";
  }
}

}  // namespace gradsync::tcp
