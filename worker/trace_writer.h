// trace.json in the Chrome trace event format (open in Perfetto or chrome://tracing): one
// process per rank ("rank N", tracks "compute" and "communication") and per ps shard
// ("shard K", tracks "receive", "apply" and "reply"), a complete event ("ph":"X") per span,
// from the span's real start and end (common/trace_span.h), and flow arrows ("ph":"s"/"f")
// from a worker's push to the shard span that received it.
//
//   TraceWriter trace(origin, 10000);
//   trace.add_span(rank, TraceTrack::kCommunication, span);   // any thread
//   trace.write("trace.rank0.json");
//
// Time zero is `origin`; every process of a run takes it at the same moment of the run (the
// end of its strategy's init, a collective every rank leaves together), so their files share
// one time axis and merge into one (worker/rank_outputs.h: merge_traces).
//
// Spans are kept in memory and written by write(); at most `max_spans_per_owner` are kept per
// rank or shard (later ones are counted and dropped, so a long run cannot exhaust memory) and
// the file says how many were dropped in its metadata. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/stopwatch.h"
#include "common/trace_span.h"

namespace gradsync {

// Shard K's events use process id kShardProcessBase + K, so that ranks and shards never share
// a process in a merged trace.
inline constexpr int kShardProcessBase = 1000;

class TraceWriter final : public TraceSink {
 public:
  // `origin` is time zero of the trace (the run's start).
  TraceWriter(Clock::time_point origin, std::int64_t max_spans_per_owner);

  // Moves time zero, for spans added from now on (before any is, to keep one time axis).
  void set_origin(Clock::time_point origin) override;

  void add_span(int owner, TraceTrack track, const TraceSpan& span) override;
  // A span on rank `rank`'s compute track: "compute", "synchronize", "evaluate"...
  void add_span(int rank, const char* name, std::int64_t step, Clock::time_point begin,
                Clock::time_point end);

  // Writes {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}} with
  // process_name and thread_name metadata for every rank and shard seen. Throws
  // gradsync::Error naming the path.
  void write(const std::string& path) const;

 private:
  struct Kept {
    TraceTrack track;
    int owner;
    TraceSpan span;
    double begin_us;
    double duration_us;
  };
  Clock::time_point origin_;
  std::int64_t max_spans_per_owner_;
  mutable std::mutex mutex_;
  std::vector<Kept> spans_;
  // Spans offered (kept or not) per (is a shard, owner): "seen" means a count > 0 even when
  // the cap is zero.
  std::map<std::pair<bool, int>, std::int64_t> offered_;
  std::int64_t dropped_ = 0;
};

}  // namespace gradsync
