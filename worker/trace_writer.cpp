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

}  // namespace

TraceWriter::TraceWriter(Clock::time_point origin, std::int64_t max_spans_per_rank)
    : origin_(origin), max_spans_per_rank_(max_spans_per_rank < 0 ? 0 : max_spans_per_rank) {}

void TraceWriter::set_origin(Clock::time_point origin) {
  std::lock_guard<std::mutex> lock(mutex_);
  origin_ = origin;
}

void TraceWriter::add_span(int rank, const char* name, std::int64_t step, Clock::time_point begin,
                           Clock::time_point end) {
  GRADSYNC_CHECK(rank >= 0, "trace span with negative rank " + std::to_string(rank));
  const double duration_us = microseconds_between(begin, end);
  std::lock_guard<std::mutex> lock(mutex_);
  const double begin_us = microseconds_between(origin_, begin);
  if (static_cast<std::size_t>(rank) >= spans_per_rank_.size()) {
    spans_per_rank_.resize(static_cast<std::size_t>(rank) + 1, 0);
  }
  // spans_per_rank_ counts every span offered (kept or not), so "seen" means count > 0 even
  // when the cap is zero.
  std::int64_t& offered = spans_per_rank_[static_cast<std::size_t>(rank)];
  ++offered;
  if (offered > max_spans_per_rank_) {
    ++dropped_;
    return;
  }
  spans_.push_back(Span{rank, name, step, begin_us, duration_us});
}

void TraceWriter::write(const std::string& path) const {
  // Serialise under the lock, write without it: file I/O must not stall ranks adding spans.
  std::string text;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    text.reserve(spans_.size() * 110 + 512);
    text += "{\"traceEvents\":[\n";
    text +=
        dump({{"ph", "M"}, {"name", "process_name"}, {"pid", 0}, {"args", {{"name", "gradsync"}}}});
    for (std::size_t rank = 0; rank < spans_per_rank_.size(); ++rank) {
      if (spans_per_rank_[rank] == 0) continue;
      const int tid = static_cast<int>(rank);
      text += ",\n";
      text += dump({{"ph", "M"},
                    {"name", "thread_name"},
                    {"pid", 0},
                    {"tid", tid},
                    {"args", {{"name", "rank " + std::to_string(rank)}}}});
      // Without a sort index viewers order tracks by first event, which shuffles the ranks.
      text += ",\n";
      text += dump({{"ph", "M"},
                    {"name", "thread_sort_index"},
                    {"pid", 0},
                    {"tid", tid},
                    {"args", {{"sort_index", tid}}}});
    }
    // One event per line keeps a large trace greppable while remaining a single JSON document.
    for (const Span& span : spans_) {
      text += ",\n";
      text += dump({{"name", span.name != nullptr ? span.name : "?"},
                    {"cat", "step"},
                    {"ph", "X"},
                    {"ts", span.begin_us},
                    {"dur", span.duration_us},
                    {"pid", 0},
                    {"tid", span.rank},
                    {"args", {{"step", span.step}}}});
    }
    text += "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":";
    text += dump({{"dropped_spans", dropped_}, {"max_spans_per_rank", max_spans_per_rank_}});
    text += "}\n";
  }

  // Beside the target, then renamed: a reader (or a crash) never sees half a trace.
  write_file_atomically(path, text);
}

}  // namespace gradsync
