// The teaching ring schedule (`gradsync teach ring`): that its simulation ends with the exact
// sum everywhere, that each rank sends what the 2(N-1)/N formula says, that it cuts the buffer
// where TcpRing does (against hand-computed boundaries, and against the bytes a real TcpRing
// counts), and the printed text for the smallest interesting case, pinned word for word.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "allreduce/in_memory_store.h"
#include "allreduce/tcp/tcp_ring.h"
#include "common/error.h"
#include "teach/ring_schedule.h"

namespace {

using gradsync::teach::ring_schedule;
using gradsync::teach::RingSchedule;
using gradsync::teach::SegmentRange;

std::vector<std::size_t> element_counts(int n) {
  return {0, 1, std::size_t(n - 1), std::size_t(n + 1), 8, 37};
}

// "[0,3) [3,5) [5,7)": each segment as [begin, end).
std::string split_text(const std::vector<SegmentRange>& segments) {
  std::string text;
  for (const SegmentRange& s : segments) {
    text += text.empty() ? "[" : " [";
    text += std::to_string(s.begin);
    text += ",";
    text += std::to_string(s.end());
    text += ")";
  }
  return text;
}

}  // namespace

TEST_CASE("teach ring: every rank ends with the exact sum, from every rank") {
  for (int n = 1; n <= 6; ++n) {
    for (std::size_t elements : element_counts(n)) {
      CAPTURE(n);
      CAPTURE(elements);
      const RingSchedule s = ring_schedule(n, elements);
      const auto& last = s.steps.empty() ? s.initial : s.steps.back().after;
      const std::uint32_t everyone = (1u << n) - 1;
      for (std::size_t i = 0; i < elements; ++i) {
        std::int64_t sum = 0;
        for (int r = 0; r < n; ++r) sum += gradsync::teach::ring_initial_value(r, i);
        CHECK(s.exact_sum[i] == sum);
        CHECK(sum == 50 * n * (n + 1) + std::int64_t(n) * std::int64_t(i));  // closed form
      }
      for (int r = 0; r < n; ++r) {
        CHECK(last.values[std::size_t(r)] == s.exact_sum);
        for (std::size_t i = 0; i < elements; ++i) {
          CHECK(last.contributors[std::size_t(r)][i] == everyone);
        }
      }
    }
  }
}

TEST_CASE("teach ring: 2(N-1) sends per rank, carrying about 2(N-1)/N of the buffer") {
  for (int n = 1; n <= 6; ++n) {
    for (std::size_t elements : element_counts(n)) {
      CAPTURE(n);
      CAPTURE(elements);
      const RingSchedule s = ring_schedule(n, elements);
      REQUIRE(s.steps.size() == std::size_t(n > 1 ? 2 * (n - 1) : 0));
      std::vector<std::size_t> forwarded(std::size_t(n), 0);
      for (const auto& step : s.steps) {
        CHECK(step.reduce == (step.index < n - 1));
        REQUIRE(step.sends.size() == std::size_t(n));
        for (int r = 0; r < n; ++r) {
          const auto& send = step.sends[std::size_t(r)];
          CHECK(send.from == r);
          CHECK(send.to == (r + 1) % n);
          // What leaves at step k is what arrived at step k-1: segment (r - k) mod n.
          CHECK(send.segment == ((r - step.index) % n + n) % n);
          CHECK(send.range.begin == s.segments[std::size_t(send.segment)].begin);
          CHECK(send.range.size == s.segments[std::size_t(send.segment)].size);
          forwarded[std::size_t(r)] += send.range.size;
        }
      }
      const double formula = 2.0 * (n - 1) / n * double(elements);
      for (int r = 0; r < n; ++r) {
        CAPTURE(r);
        CHECK(s.messages_sent[std::size_t(r)] == (n > 1 ? 2 * (n - 1) : 0));
        CHECK(s.elements_sent[std::size_t(r)] == forwarded[std::size_t(r)]);
        // Rank r sends every segment but r+1 in reduce-scatter and every one but r+2 in
        // all-gather.
        if (n > 1) {
          const std::size_t skipped =
              s.segments[std::size_t((r + 1) % n)].size + s.segments[std::size_t((r + 2) % n)].size;
          CHECK(s.elements_sent[std::size_t(r)] == 2 * elements - skipped);
        }
        // Each skipped segment is within one element of elements / n.
        CHECK(std::abs(double(s.elements_sent[std::size_t(r)]) - formula) < 2.0);
        if (elements % std::size_t(n) == 0) {
          CHECK(double(s.elements_sent[std::size_t(r)]) == formula);
        }
      }
    }
  }
}

TEST_CASE("teach ring: segments are cut where TcpRing cuts them") {
  using gradsync::teach::ring_segments;
  // By hand: the first count % n segments take one extra element. Compared as text: GCC 12.2
  // with -march=native (AVX-512VL) was seen to build std::vector<std::size_t>{1, 1, 0, 0} as
  // {1, 1, 1, 1}, so the expected values here are not vector literals.
  CHECK(split_text(ring_segments(8, 4)) == "[0,2) [2,4) [4,6) [6,8)");
  CHECK(split_text(ring_segments(7, 3)) == "[0,3) [3,5) [5,7)");
  CHECK(split_text(ring_segments(10, 4)) == "[0,3) [3,6) [6,8) [8,10)");
  CHECK(split_text(ring_segments(37, 6)) == "[0,7) [7,13) [13,19) [19,25) [25,31) [31,37)");
  CHECK(split_text(ring_segments(2, 4)) == "[0,1) [1,2) [2,2) [2,2)");
  CHECK(split_text(ring_segments(1, 3)) == "[0,1) [1,1) [1,1)");
  CHECK(split_text(ring_segments(0, 3)) == "[0,0) [0,0) [0,0)");
  CHECK(split_text(ring_segments(5, 1)) == "[0,5)");

  for (int n = 1; n <= 6; ++n) {
    for (std::size_t elements : element_counts(n)) {
      const auto segments = ring_segments(elements, n);
      REQUIRE(segments.size() == std::size_t(n));
      std::size_t next = 0;
      for (const SegmentRange& s : segments) {
        CHECK(s.begin == next);  // contiguous, in order
        CHECK((s.size == elements / n || s.size == elements / n + 1));
        next = s.end();
      }
      CHECK(next == elements);
    }
  }
}

// The bytes each rank of a real TcpRing sends depend on which segments it skips (r+1, r+2), so
// with uneven splits they differ per rank and pin down where the real split puts the extras.
TEST_CASE("teach ring: a real TcpRing sends per rank exactly what the schedule says") {
  for (auto [n, elements] : {std::pair{3, std::size_t(7)}, {4, 10}, {4, 2}, {5, 8}}) {
    CAPTURE(n);
    CAPTURE(elements);
    const RingSchedule s = ring_schedule(n, elements);
    gradsync::InMemoryStore store;
    gradsync::TcpRingOptions options;
    options.timeout = std::chrono::seconds(10);
    std::vector<std::uint64_t> sent(static_cast<std::size_t>(n), 0);
    std::vector<std::vector<float>> data(static_cast<std::size_t>(n));
    std::vector<std::string> errors(static_cast<std::size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        try {
          auto ring = gradsync::make_tcp_ring(store, r, n, options);
          auto& mine = data[std::size_t(r)];
          for (std::size_t i = 0; i < elements; ++i) {
            mine.push_back(float(gradsync::teach::ring_initial_value(r, i)));
          }
          ring->allreduce(mine, gradsync::ReduceOp::kSum);
          sent[std::size_t(r)] = ring->counters().bytes_sent;
        } catch (const std::exception& e) {
          errors[std::size_t(r)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(errors[std::size_t(r)] == "");
      CHECK(sent[std::size_t(r)] == s.elements_sent[std::size_t(r)] * sizeof(float));
      for (std::size_t i = 0; i < elements; ++i) {
        CHECK(double(data[std::size_t(r)][i]) == double(s.exact_sum[i]));
      }
    }
  }
}

TEST_CASE("teach ring: worker counts outside 1..16 are refused") {
  CHECK_THROWS_AS(ring_schedule(0, 4), gradsync::Error);
  CHECK_THROWS_AS(ring_schedule(17, 4), gradsync::Error);
  CHECK_NOTHROW(ring_schedule(16, 64));
}

TEST_CASE("teach ring: printed lines fit 100 columns for up to 8 workers") {
  for (int n = 1; n <= 8; ++n) {
    for (std::size_t elements :
         {std::size_t(0), std::size_t(1), std::size_t(n - 1), std::size_t(13), std::size_t(64)}) {
      CAPTURE(n);
      CAPTURE(elements);
      std::istringstream text(
          gradsync::teach::render_ring_schedule(ring_schedule(n, elements), {true}));
      for (std::string line; std::getline(text, line);) {
        CAPTURE(line);
        CHECK(line.size() <= 100);
        CHECK((line.empty() || line.back() != ' '));
      }
    }
  }
}

TEST_CASE("teach ring: the schedule for 2 ranks and 2 elements, as printed") {
  const std::string expected =
      R"golden(Ring all-reduce of 2 elements over 2 ranks, as TcpRing runs it (allreduce/tcp/tcp_ring.cpp)

Rank r sends only to rank r+1 and receives only from rank r-1, around the ring:
  0 -> 1 -> 0
Ranks 0 and 1 start with gradients a and b; the goal is a+b on every rank.

The buffer is cut into 2 segments, one per rank, as TcpRing cuts it.
2 = 2 x 1: every segment has 1 element.
  segment 0: [0,1)       segment 1: [1,2)

A table cell is one rank's copy of one segment, named by the ranks summed into it:
"a." = a alone (a dot: that rank's values are not in yet), "ab" = a+b.
All elements of a segment move together; * marks what has just arrived.

Before the first step every rank holds only its own values:
          seg 0  seg 1
  rank 0  a.     a.
  rank 1  .b     .b

Phase 1, reduce-scatter, 1 step: rank r first sends segment r to rank r+1, which adds its
own values in; then each rank forwards the segment it has just received, so a partial sum grows
by one rank per step.

Step 1 of 2 (reduce-scatter; the receiver adds it in):
  rank 0 -> rank 1  segment 0  [0,1)    1 element    carrying a.
  rank 1 -> rank 0  segment 1  [1,2)    1 element    carrying .b
          seg 0  seg 1
  rank 0  a.     ab*
  rank 1  ab*    .b

After reduce-scatter each segment is complete on exactly one rank: rank r holds the full sum
of segment r+1 (mod 2).

Phase 2, all-gather, 1 step: rank r sends its complete segment r+1 on, then forwards what
it has just received; the receiver overwrites its partial copy.

Step 2 of 2 (all-gather; the receiver overwrites its copy):
  rank 0 -> rank 1  segment 1  [1,2)    1 element    carrying ab
  rank 1 -> rank 0  segment 0  [0,1)    1 element    carrying ab
          seg 0  seg 1
  rank 0  ab*    ab
  rank 1  ab     ab*

Result: every rank holds a+b in every element.
In numbers: element i of rank r started as 100*(r+1) + i, so the exact sum is
  100*(1+2) + 2*i = 300 + 2*i:
  rank 0: 300 302
  rank 1: 300 302
Both ranks hold exactly the sum.

Traffic, with S = 2 elements = 8 bytes (float32; TcpRing counts these payload bytes):
          messages  elements sent  bytes sent  bytes received
  rank 0         2              2           8               8
  rank 1         2              2           8               8
  2(N-1)/N * S = 2*1/2 * 8 bytes = 8 bytes sent, and as many received, per rank.
  Both links are busy in every step, each with about S/N: 2(N-1) = 2 steps of S/N.

Compare with one central node (DESIGN.md's traffic table), N = 2, S = 8 bytes:
  dp, DataParallel:  replica 0 receives (N-1)*S and sends (N-1)*S: 2(N-1)*S = 16 bytes.
  ps, one server:    the server receives N*S and sends N*S: 2N*S = 32 bytes.
  allreduce, ring:   the busiest rank moves 8 out + 8 in = 16 bytes, about 4(N-1)/N * S.
The central node's load grows with N; a ring rank's stays under 4S however many ranks join.
)golden";
  CHECK(gradsync::teach::render_ring_schedule(ring_schedule(2, 2)) == expected);
}
