// trace.json in the Chrome trace event format (open in Perfetto or chrome://tracing): one
// track per rank, a complete event ("ph":"X") per span such as compute or communicate.
//
// Spans are kept in memory and written by write(); at most `max_spans_per_rank` are kept per
// rank (later ones are counted and dropped, so a long run cannot exhaust memory) and the file
// says how many were dropped in its metadata. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/stopwatch.h"

namespace gradsync {

class TraceWriter {
 public:
  // `origin` is time zero of the trace (the run's start).
  TraceWriter(Clock::time_point origin, std::int64_t max_spans_per_rank);

  // Moves time zero, for spans added from now on (before any is, to keep one time axis).
  void set_origin(Clock::time_point origin);

  // name: "compute", "communicate", "wait", "evaluate"...; step is recorded in args.
  void add_span(int rank, const char* name, std::int64_t step, Clock::time_point begin,
                Clock::time_point end);

  // Writes {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}} with a
  // thread_name metadata event "rank N" per rank seen. Throws gradsync::Error naming the path.
  void write(const std::string& path) const;

 private:
  struct Span {
    int rank;
    const char* name;
    std::int64_t step;
    double begin_us;
    double duration_us;
  };
  Clock::time_point origin_;
  std::int64_t max_spans_per_rank_;
  mutable std::mutex mutex_;
  std::vector<Span> spans_;
  std::vector<std::int64_t> spans_per_rank_;
  std::int64_t dropped_ = 0;
};

}  // namespace gradsync
