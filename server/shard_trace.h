// ShardTrace: a ps shard's spans for trace.json (common/trace_span.h), from real timestamps:
//
//   receive   per worker and step: its push's first chunk arriving to its last (the arrow from
//             the worker's push_pull ends here: trace_flow_id(rank, shard, step))
//   apply     each update the shard runs (sync: once every worker pushed a chunk; async/ssp:
//             on each push), with the replies it queues; step: the push's step
//   reply     per worker: the first chunk of a reply handed to the socket to the last; step:
//             the version of the parameters it carries
//
//   ShardTrace trace(options.trace, options.shard);   // a null sink: every call does nothing
//   trace.received(rank, step, first, last, bytes, now);
//
// One per thread that records (the shard's serving loop); not thread-safe itself.
#pragma once

#include <cstdint>
#include <map>

#include "common/stopwatch.h"
#include "common/trace_span.h"

namespace gradsync {

class ShardTrace {
 public:
  ShardTrace(TraceSink* sink, int shard) : sink_(sink), shard_(shard) {}

  bool on() const { return sink_ != nullptr; }
  // The shard's time zero (TraceSink::set_origin): when it answers what waited for INIT.
  void start_clock(Clock::time_point at) {
    if (on() && !clock_started_) sink_->set_origin(at);
    clock_started_ = true;
  }
  void received(int rank, std::uint64_t step, bool first_chunk, bool last_chunk,
                std::uint64_t bytes, Clock::time_point at);
  void applied(int rank, std::uint64_t step, Clock::time_point begin, Clock::time_point end);
  void sent(int rank, std::uint64_t version, bool first_chunk, bool last_chunk, std::uint64_t bytes,
            Clock::time_point at);

 private:
  struct Open {
    Clock::time_point begin;
    std::uint64_t step = 0;  // the first chunk's: an async reply's later chunks may carry newer
    std::uint64_t bytes = 0;
  };
  // Adds `bytes` to the span open for `rank` (one worker's chunks come in order, one request at
  // a time), opening it at `at` on the first chunk (or on any chunk, if the first went unseen);
  // on the last chunk closes and emits it.
  void piece(std::map<int, Open>& open, TraceTrack track, const char* name, int rank,
             std::uint64_t step, bool first_chunk, bool last_chunk, std::uint64_t bytes,
             Clock::time_point at);

  TraceSink* sink_;
  int shard_;
  std::map<int, Open> receiving_;
  std::map<int, Open> replying_;
  bool clock_started_ = false;
};

}  // namespace gradsync
