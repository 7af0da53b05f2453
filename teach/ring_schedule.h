// The ring all-reduce schedule as a teaching aid: what `gradsync teach ring` prints.
//
//   const teach::RingSchedule s = teach::ring_schedule(4, 8);   // 4 ranks, 8 elements
//   std::cout << teach::render_ring_schedule(s);
//
// ring_schedule simulates, on plain integers and without any sockets, the exact schedule that
// TcpRing (allreduce/tcp/tcp_ring.cpp) runs: the buffer is split into N segments the same way
// (the first count % N segments take one extra element), and at step k of 2(N-1) rank r sends
// segment (r - k) mod N to rank r + 1 and receives segment (r - k - 1) mod N from rank r - 1,
// adding it in during the first N-1 steps (reduce-scatter) and overwriting with it during the
// last N-1 (all-gather). Rank r starts with value(r, i) = 100 (r + 1) + i at element i, so
// every sum is an exact integer, and each element also carries the set of ranks whose values
// it holds the sum of, which is what the printed tables show ("ab.." = a + b).
//
// Pure functions: no I/O, no shared state; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gradsync::teach {

inline constexpr int kMaxRingWorkers = 16;  // ranks are named a..p

// Segment s of the buffer: elements [begin, begin + size).
struct SegmentRange {
  std::size_t begin = 0;
  std::size_t size = 0;
  std::size_t end() const { return begin + size; }
};

// The N segments of a buffer of `elements` split over `workers` ranks, exactly as TcpRing
// splits it (its `Segments`, allreduce/tcp/tcp_ring.cpp).
std::vector<SegmentRange> ring_segments(std::size_t elements, int workers);

// Element i of rank r before the all-reduce: 100 (r + 1) + i (a = 100, 101, ...; b = 200, ...).
std::int64_t ring_initial_value(int rank, std::size_t element);

// Every rank's buffer at one moment: values[r][i], and contributors[r][i], a bit mask with bit
// q set when rank q's value of element i is summed into values[r][i].
struct RingBuffers {
  std::vector<std::vector<std::int64_t>> values;
  std::vector<std::vector<std::uint32_t>> contributors;
};

// What rank `from` sends to its right neighbour `to` in one step: segment `segment`, i.e.
// elements [range.begin, range.end()). An empty segment is a send with nothing in it (TcpRing
// puts nothing on the wire for it).
struct RingSend {
  int from = 0;
  int to = 0;
  int segment = 0;
  SegmentRange range;
};

struct RingStepView {
  int index = 0;                // 0-based; steps [0, N-1) reduce-scatter, [N-1, 2(N-1)) all-gather
  bool reduce = false;          // the receiver adds the segment in (reduce-scatter), or copies it
  std::vector<RingSend> sends;  // one per rank: sends[r].from == r
  RingBuffers after;            // every rank's buffer once this step is done
};

struct RingSchedule {
  int workers = 0;
  std::size_t elements = 0;
  std::vector<SegmentRange> segments;
  RingBuffers initial;
  std::vector<RingStepView> steps;         // 2(N-1) of them; none for N = 1
  std::vector<std::int64_t> exact_sum;     // sum over ranks of ring_initial_value, per element
  std::vector<int> messages_sent;          // per rank: one per step, empty segments included
  std::vector<std::size_t> elements_sent;  // per rank: sum of the sizes of the segments it sent
};

// Throws gradsync::Error unless 1 <= workers <= kMaxRingWorkers.
RingSchedule ring_schedule(int workers, std::size_t elements);

struct RingRenderOptions {
  bool numeric = false;  // also print every rank's numbers after each step
};

// The schedule as text for a terminal: the split, one table per step, the final buffers, the
// bytes each rank sent against 2(N-1)/N * S, and the contrast with dp and ps. Lines fit in
// 100 columns for up to 8 workers.
std::string render_ring_schedule(const RingSchedule& schedule,
                                 const RingRenderOptions& options = {});

}  // namespace gradsync::teach
