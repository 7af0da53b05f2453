// The ring schedule itself: segments, initial values, and every step's sends and receives,
// simulated on integers (ring_schedule.h). Its printing is in ring_schedule_text.cpp.
#include "teach/ring_schedule.h"

#include <algorithm>

#include "common/error.h"

namespace gradsync::teach {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace

std::vector<SegmentRange> ring_segments(std::size_t elements, int workers) {
  GRADSYNC_CHECK(workers >= 1, "ring_segments: workers must be at least 1");
  // Mirrors `Segments` in allreduce/tcp/tcp_ring.cpp: the first elements % n segments take one
  // extra element, so segment s starts after s full segments plus one extra element for each
  // of the min(s, elements % n) longer segments before it.
  const std::size_t base = elements / std::size_t(workers);
  const std::size_t extra = elements % std::size_t(workers);
  std::vector<SegmentRange> segments(static_cast<std::size_t>(workers));
  for (std::size_t s = 0; s < segments.size(); ++s) {
    segments[s].begin = s * base + std::min(s, extra);
    segments[s].size = base + (s < extra ? 1 : 0);
  }
  return segments;
}

std::int64_t ring_initial_value(int rank, std::size_t element) {
  return 100 * std::int64_t(rank + 1) + std::int64_t(element);
}

RingSchedule ring_schedule(int workers, std::size_t elements) {
  if (workers < 1 || workers > kMaxRingWorkers) {
    throw Error("teach ring: workers must be in [1, " + std::to_string(kMaxRingWorkers) +
                "], not " + std::to_string(workers));
  }
  const int n = workers;
  RingSchedule s;
  s.workers = n;
  s.elements = elements;
  s.segments = ring_segments(elements, n);
  s.initial.values.assign(std::size_t(n), std::vector<std::int64_t>(elements));
  s.initial.contributors.assign(std::size_t(n), std::vector<std::uint32_t>(elements));
  s.exact_sum.assign(elements, 0);
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < elements; ++i) {
      s.initial.values[std::size_t(r)][i] = ring_initial_value(r, i);
      s.initial.contributors[std::size_t(r)][i] = 1u << r;
      s.exact_sum[i] += ring_initial_value(r, i);
    }
  }
  s.messages_sent.assign(std::size_t(n), 0);
  s.elements_sent.assign(std::size_t(n), 0);

  // Mirrors TcpRing::allreduce_steps (allreduce/tcp/tcp_ring.cpp): step k sends segment
  // (r - k) and receives segment (r - k - 1), so what arrives at step k is what leaves at step
  // k+1. In the first N-1 steps the arriving segment is added in; after them rank r holds the
  // complete sum of segment (r + 1), and the last N-1 steps circulate the complete segments.
  // N = 1 has no steps (TcpRing moves nothing either).
  RingBuffers current = s.initial;
  for (int k = 0; n > 1 && k < 2 * (n - 1); ++k) {
    RingStepView step;
    step.index = k;
    step.reduce = k < n - 1;
    const RingBuffers before = current;  // every rank sends what it held when the step began
    for (int r = 0; r < n; ++r) {
      RingSend send;
      send.from = r;
      send.to = mod(r + 1, n);
      send.segment = mod(r - k, n);
      send.range = s.segments[std::size_t(send.segment)];
      step.sends.push_back(send);
      ++s.messages_sent[std::size_t(r)];
      s.elements_sent[std::size_t(r)] += send.range.size;

      const auto to = std::size_t(send.to);
      for (std::size_t i = send.range.begin; i < send.range.end(); ++i) {
        const std::int64_t value = before.values[std::size_t(r)][i];
        const std::uint32_t mask = before.contributors[std::size_t(r)][i];
        if (step.reduce) {
          current.values[to][i] += value;
          current.contributors[to][i] |= mask;
        } else {
          current.values[to][i] = value;
          current.contributors[to][i] = mask;
        }
      }
    }
    step.after = current;
    s.steps.push_back(std::move(step));
  }
  return s;
}

}  // namespace gradsync::teach
