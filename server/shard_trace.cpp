#include "server/shard_trace.h"

namespace gradsync {

void ShardTrace::piece(std::map<int, Open>& open, TraceTrack track, const char* name, int rank,
                       std::uint64_t step, bool first_chunk, bool last_chunk, std::uint64_t bytes,
                       Clock::time_point at) {
  auto found = open.find(rank);
  if (found == open.end() || first_chunk) {
    found = open.insert_or_assign(rank, Open{at, step, 0}).first;
  }
  found->second.bytes += bytes;
  if (!last_chunk) return;
  step = found->second.step;
  TraceSpan span{name, static_cast<std::int64_t>(step), found->second.begin, at};
  span.bytes = found->second.bytes;
  span.index = rank;
  if (track == TraceTrack::kShardReceive) {
    span.flow_in = trace_flow_id(rank, shard_, static_cast<std::int64_t>(step));
  }
  open.erase(found);
  sink_->add_span(shard_, track, span);
}

void ShardTrace::received(int rank, std::uint64_t step, bool first_chunk, bool last_chunk,
                          std::uint64_t bytes, Clock::time_point at) {
  if (!on()) return;
  piece(receiving_, TraceTrack::kShardReceive, "receive", rank, step, first_chunk, last_chunk,
        bytes, at);
}

void ShardTrace::applied(int rank, std::uint64_t step, Clock::time_point begin,
                         Clock::time_point end) {
  if (!on()) return;
  TraceSpan span{"apply", static_cast<std::int64_t>(step), begin, end};
  span.index = rank;
  sink_->add_span(shard_, TraceTrack::kShardApply, span);
}

void ShardTrace::sent(int rank, std::uint64_t version, bool first_chunk, bool last_chunk,
                      std::uint64_t bytes, Clock::time_point at) {
  if (!on()) return;
  piece(replying_, TraceTrack::kShardReply, "reply", rank, version, first_chunk, last_chunk, bytes,
        at);
}

}  // namespace gradsync
