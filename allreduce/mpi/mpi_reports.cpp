#include "allreduce/mpi/mpi_reports.h"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "allreduce/tcp/socket.h"

namespace gradsync::mpi {
namespace {

using std::chrono::milliseconds;
using tcp::Clock;

// The quick read that checks the Store answers before a set (our own joined key is always
// there); how long one read of a report waits for it to appear; the pause between two rounds
// of reading the reports still older than the collective in question. A round costs at most
// kReadTimeout per rank still behind, so the grace period is overrun by at most one round.
constexpr milliseconds kProbeTimeout{250};
constexpr milliseconds kReadTimeout{50};
constexpr milliseconds kRereadPause{50};

}  // namespace

std::string MpiReports::key(const char* kind, int rank) const {
  return prefix_ + "/" + kind + "/" + std::to_string(rank);
}

void MpiReports::join(const std::string& host, milliseconds timeout) {
  store_.set(key("joined", rank_), host);
  std::vector<std::string> all;
  for (int r = 0; r < size_; ++r) all.push_back(key("joined", r));
  store_.wait(all, timeout);
}

std::string MpiReports::host_of(int rank) {
  try {
    return store_.get(key("joined", rank), kProbeTimeout);
  } catch (const std::exception&) {
    return "mpi";
  }
}

void MpiReports::publish(const std::string& key, const std::string& value) {
  try {
    store_.get(this->key("joined", rank_), kProbeTimeout);
    store_.set(key, value);
  } catch (const std::exception&) {
    // The Store is unreachable (rank 0 stopped): the laggard goes unnamed, nothing worse.
  }
}

void MpiReports::publish_progress(Progress mine) {
  publish(key("progress", rank_),
          "started=" + std::to_string(mine.started) + " finished=" + std::to_string(mine.finished));
}

void MpiReports::publish_abort(const std::string& reason) {
  publish(key("aborted", rank_), reason);
}

std::vector<std::optional<Progress>> MpiReports::collect(Progress mine, std::uint64_t seq,
                                                         milliseconds grace) {
  const auto deadline = Clock::now() + grace;
  std::vector<std::optional<Progress>> all(static_cast<std::size_t>(size_));
  all[std::size_t(rank_)] = mine;
  const auto behind = [&](int r) {
    const auto& p = all[std::size_t(r)];
    return !p || p->started < seq;
  };
  while (true) {
    bool waiting = false;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_ || !behind(r)) continue;
      try {
        const std::string text = store_.get(key("progress", r), kReadTimeout);
        unsigned long long s = 0, f = 0;
        if (std::sscanf(text.c_str(), "started=%llu finished=%llu", &s, &f) == 2) {
          all[std::size_t(r)] = Progress{s, f};
        }
      } catch (const std::exception&) {
        // No report (yet): this rank never ran a slow collective, or is not in this one.
      }
      waiting = waiting || behind(r);
    }
    if (!waiting || Clock::now() + kRereadPause >= deadline) return all;
    std::this_thread::sleep_for(kRereadPause);
  }
}

std::string MpiReports::describe(const std::vector<std::optional<Progress>>& all) {
  std::string text;
  for (std::size_t r = 0; r < all.size(); ++r) {
    text += (r == 0 ? "rank " : ", rank ") + std::to_string(r) + " ";
    text += all[r] ? std::to_string(all[r]->started) + "/" + std::to_string(all[r]->finished)
                   : std::string("no report");
  }
  return text;
}

}  // namespace gradsync::mpi
