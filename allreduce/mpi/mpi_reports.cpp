#include "allreduce/mpi/mpi_reports.h"

#include <algorithm>
#include <thread>

#include "allreduce/tcp/socket.h"

namespace gradsync::mpi {
namespace {

using std::chrono::milliseconds;
using tcp::Clock;

// The quick read that checks the Store answers before a set (our own joined key is always
// there); the longest one question to the Store may take while collecting (asking whether a
// report exists, then reading one that does: neither waits for a key); the pause between two
// rounds of reading the reports still older than the collective in question.
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

bool MpiReports::publish(const std::string& key, const std::string& value) {
  // Unreachable (rank 0 stopped): the caller may say so; nothing worse.
  return publish_if_reachable(store_, this->key("joined", rank_), key, value, kProbeTimeout);
}

bool MpiReports::publish_progress(Progress mine) {
  return publish(key("progress", rank_), format_progress(mine));
}

void MpiReports::publish_abort(const std::string& reason) {
  publish(key("aborted", rank_), reason);
}

std::optional<Progress> MpiReports::read_if_present(int r, milliseconds limit) {
  try {
    const std::string k = key("progress", r);
    // check() waits for no key, only for the Store's answer: a silent rank costs one round trip.
    if (!store_.check({k}, limit)) return std::nullopt;
    return parse_progress(store_.get(k, limit));  // there: get returns at once
  } catch (const std::exception&) {
    return std::nullopt;  // the Store did not answer in time: as good as no report
  }
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
      // The round stops at the deadline: a slow Store must not carry it past the grace period
      // (the caller's line naming the laggard has to come before Work::wait gives up).
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left <= milliseconds(0)) return all;
      if (auto p = read_if_present(r, std::min(left, kReadTimeout))) all[std::size_t(r)] = p;
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
