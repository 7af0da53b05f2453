#include "worker/trace_writer.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/error.h"

namespace gradsync {
namespace {

using nlohmann::json;

double microseconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// Span names are plain identifiers, but a stray byte must not make the whole trace unwritable.
std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool is_shard_track(TraceTrack track) {
  return track == TraceTrack::kShardReceive || track == TraceTrack::kShardApply ||
         track == TraceTrack::kShardReply;
}

int process_id(bool shard, int owner) { return shard ? kShardProcessBase + owner : owner; }

// Tracks within their process, in the order viewers show them.
int thread_id(TraceTrack track) {
  switch (track) {
    case TraceTrack::kCompute:
    case TraceTrack::kShardReceive:
      return 0;
    case TraceTrack::kCommunication:
    case TraceTrack::kShardApply:
      return 1;
    case TraceTrack::kShardReply:
      return 2;
  }
  return 0;
}

std::string flow_text(std::uint64_t id) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(id));
  return text;
}

// Events are joined with ",\n" when the document is assembled: one event per line keeps a
// large trace greppable while remaining a single JSON document.
void append(std::vector<std::string>& events, const json& event) { events.push_back(dump(event)); }

void append_metadata(std::vector<std::string>& text, bool shard, int owner) {
  const int pid = process_id(shard, owner);
  const std::string who = (shard ? "shard " : "rank ") + std::to_string(owner);
  append(text, {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", who}}}});
  // Without sort indices viewers order processes and tracks by first event, which shuffles them.
  append(
      text,
      {{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"args", {{"sort_index", pid}}}});
  const std::vector<std::pair<TraceTrack, const char*>> tracks =
      shard
          ? std::vector<std::pair<TraceTrack, const char*>>{{TraceTrack::kShardReceive, "receive"},
                                                            {TraceTrack::kShardApply, "apply"},
                                                            {TraceTrack::kShardReply, "reply"}}
          : std::vector<std::pair<TraceTrack, const char*>>{
                {TraceTrack::kCompute, "compute"}, {TraceTrack::kCommunication, "communication"}};
  for (const auto& [track, name] : tracks) {
    const int tid = thread_id(track);
    append(text, {{"ph", "M"},
                  {"name", "thread_name"},
                  {"pid", pid},
                  {"tid", tid},
                  {"args", {{"name", who + " " + name}}}});
    append(text, {{"ph", "M"},
                  {"name", "thread_sort_index"},
                  {"pid", pid},
                  {"tid", tid},
                  {"args", {{"sort_index", tid}}}});
  }
}

}  // namespace

TraceWriter::TraceWriter(Clock::time_point origin, std::int64_t max_spans_per_owner)
    : origin_(origin), max_spans_per_owner_(max_spans_per_owner < 0 ? 0 : max_spans_per_owner) {}

void TraceWriter::set_origin(Clock::time_point origin) {
  std::lock_guard<std::mutex> lock(mutex_);
  origin_ = origin;
}

void TraceWriter::add_span(int rank, const char* name, std::int64_t step, Clock::time_point begin,
                           Clock::time_point end) {
  add_span(rank, TraceTrack::kCompute, TraceSpan{name, step, begin, end});
}

void TraceWriter::add_span(int owner, TraceTrack track, const TraceSpan& span) {
  GRADSYNC_CHECK(owner >= 0, "trace span with negative owner " + std::to_string(owner));
  const double duration_us = microseconds_between(span.begin, span.end);
  std::lock_guard<std::mutex> lock(mutex_);
  const double begin_us = microseconds_between(origin_, span.begin);
  std::int64_t& offered = offered_[{is_shard_track(track), owner}];
  if (++offered > max_spans_per_owner_) {
    ++dropped_;
    return;
  }
  spans_.push_back(Kept{track, owner, span, begin_us, duration_us < 0 ? 0 : duration_us});
}

void TraceWriter::write(const std::string& path) const {
  // Serialise under the lock, write without it: file I/O must not stall ranks adding spans.
  std::string text;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> events;
    events.reserve(spans_.size() + 8 * offered_.size());
    for (const auto& [who, count] : offered_) {
      if (count > 0) append_metadata(events, who.first, who.second);
    }
    for (const Kept& kept : spans_) {
      const TraceSpan& span = kept.span;
      const int pid = process_id(is_shard_track(kept.track), kept.owner);
      const int tid = thread_id(kept.track);
      json args = {{"step", span.step}};
      if (span.bytes > 0) args["bytes"] = span.bytes;
      if (span.index >= 0) {
        const bool names_worker =
            kept.track == TraceTrack::kShardReceive || kept.track == TraceTrack::kShardReply;
        args[names_worker ? "worker" : "index"] = span.index;
      }
      append(events, {{"name", span.name != nullptr ? span.name : "?"},
                      {"cat", is_shard_track(kept.track) ? "shard" : "step"},
                      {"ph", "X"},
                      {"ts", kept.begin_us},
                      {"dur", kept.duration_us},
                      {"pid", pid},
                      {"tid", tid},
                      {"args", std::move(args)}});
      // Arrows bind to the slice that encloses their timestamp: the start inside this span,
      // the end at the start of the receiving one ("bp":"e").
      const auto arrow = [&](const char* phase, std::uint64_t id) {
        json event = {{"name", "push"},      {"cat", "flow"}, {"ph", phase}, {"id", flow_text(id)},
                      {"ts", kept.begin_us}, {"pid", pid},    {"tid", tid}};
        if (phase[0] == 'f') event["bp"] = "e";
        append(events, event);
      };
      if (span.flow_out != 0) arrow("s", span.flow_out);
      if (span.flow_in != 0) arrow("f", span.flow_in);
    }
    std::size_t bytes = 256;
    for (const std::string& event : events) bytes += event.size() + 2;
    text.reserve(bytes);
    text += "{\"traceEvents\":[\n";
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (i > 0) text += ",\n";
      text += events[i];
    }
    text += "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":";
    text += dump({{"dropped_spans", dropped_}, {"max_spans_per_owner", max_spans_per_owner_}});
    text += "}\n";
  }

  // Beside the target, then renamed: a reader (or a crash) never sees half a trace.
  write_file_atomically(path, text);
}

}  // namespace gradsync
