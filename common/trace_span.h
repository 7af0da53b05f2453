// One stretch of real time that a rank or a ps shard spent on something, for trace.json
// (worker/trace_writer.h writes them). Spans carry timestamps taken when the thing began and
// ended, on the monotonic clock, never durations laid end to end: a bucket's all-reduce that
// ran while backward went on shows as running beside it.
//
//   TraceSpan span{"allreduce", step, started, finished};
//   span.bytes = bucket_bytes;
//   span.index = bucket;                                   // bucket number, worker rank, ...
//   sink.add_span(rank, TraceTrack::kCommunication, span);
//
// Flows join a span in one process to one in another (a worker's push to the shard that
// receives it): both sides compute the same id from what they both know (trace_flow_id).
#pragma once

#include <cstdint>

#include "common/stopwatch.h"

namespace gradsync {

// A rank has a compute track (its training thread) and a communication track (collectives and
// messages, which may run beside compute); a ps shard has receive, apply and reply tracks.
enum class TraceTrack { kCompute, kCommunication, kShardReceive, kShardApply, kShardReply };

struct TraceSpan {
  const char* name = "";  // a string literal: "compute", "allreduce", "receive", ...
  std::int64_t step = -1;
  Clock::time_point begin{};
  Clock::time_point end{};
  std::uint64_t bytes = 0;     // payload moved, when the span moved any
  int index = -1;              // what `name` needs to be told apart: bucket, shard or worker
  std::uint64_t flow_out = 0;  // nonzero: an arrow starts here ...
  std::uint64_t flow_in = 0;   // ... and ends at the span with the same id as flow_in
};

// Where spans go. Thread-safe in every implementation.
class TraceSink {
 public:
  virtual ~TraceSink() = default;
  // `owner`: the rank for kCompute and kCommunication, the shard for the shard tracks.
  virtual void add_span(int owner, TraceTrack track, const TraceSpan& span) = 0;
  // Time zero from now on: the moment the run's rendezvous ended, as this process saw it (a
  // rank: its strategy's init returned; a shard: it answered the requests held for INIT), so
  // that every process's spans share one time axis. Called before the first span.
  virtual void set_origin(Clock::time_point origin) = 0;
};

// The id of the arrow from worker `rank`'s push of `step` to shard `shard`'s receipt of it.
inline std::uint64_t trace_flow_id(int rank, int shard, std::int64_t step) {
  // Nonzero for every step >= 0 (0 means "no arrow"); written as a hex string, so the
  // trace's JSON readers never round it.
  return ((static_cast<std::uint64_t>(step) + 1) << 32) | (static_cast<std::uint64_t>(rank) << 16) |
         (static_cast<std::uint64_t>(shard) & 0xffff);
}

}  // namespace gradsync
