// What TcpRing's and MpiCommunicator's failure reports (tcp/ring_reports.h, mpi/mpi_reports.h)
// have in common: how far a rank got, as text in the Store, and a set that cannot hang.
//
//   publish_if_reachable(store, "ring/addr/3", "ring/report/3", format_progress({7, 6}), 250ms);
//   if (auto p = parse_progress(store.get("ring/report/2", 50ms))) ... p->started ...
//
// Header-only, no state; thread-safe as the Store is.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "allreduce/store.h"

namespace gradsync {

// The last collective sequence numbers a rank started and finished (1-based; 0: none yet).
struct ProgressReport {
  std::uint64_t started = 0;
  std::uint64_t finished = 0;
};

// "started=7 finished=6".
inline std::string format_progress(ProgressReport p) {
  return "started=" + std::to_string(p.started) + " finished=" + std::to_string(p.finished);
}

// format_progress's text back; nullopt for anything else.
inline std::optional<ProgressReport> parse_progress(const std::string& text) {
  unsigned long long s = 0, f = 0;
  if (std::sscanf(text.c_str(), "started=%llu finished=%llu", &s, &f) != 2) return std::nullopt;
  return ProgressReport{s, f};
}

// Sets `key` only if the Store answers a quick read of `probe_key` (a key this rank set when it
// joined, so always there) within `probe_timeout`: Store::set has no timeout of its own, and a
// dead TcpStore server would hold it for the store's whole connect timeout. Best effort: never
// throws, and says whether the set was made.
inline bool publish_if_reachable(Store& store, const std::string& probe_key, const std::string& key,
                                 const std::string& value,
                                 std::chrono::milliseconds probe_timeout) {
  try {
    store.get(probe_key, probe_timeout);
    store.set(key, value);
    return true;
  } catch (const std::exception&) {
    return false;  // the Store is unreachable (rank 0 stopped): the failure still reaches callers
  }
}

}  // namespace gradsync
