// shm::sum_slots, the shared-memory backend's kernel: every element summed in slot order, so
// that the rank that sums a slice gets the bits any other rank would.
#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include "allreduce/shm/shm_sum.h"

using gradsync::shm::sum_slots;

TEST_CASE("sum_slots adds the slots in their order, from begin to end and nothing else") {
  // 1e8 - 1e8 + 1 is 1 in float summed left to right, 0 summed right to left: the order shows.
  const std::size_t n = 2500;  // crosses the 1024-float blocks, with a ragged last one
  std::vector<float> a(n, 1e8f), b(n, -1e8f), c(n, 1.0f), out(n, -7.0f);
  sum_slots(out.data(), {a.data(), b.data(), c.data()}, 3, n - 2, 0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    CAPTURE(i);
    CHECK(out[i] == (i < 3 || i >= n - 2 ? -7.0f : 1.0f));
  }
  CHECK(1e8f + (-1e8f + 1.0f) == 0.0f);  // the other order: the case means what it says
}

TEST_CASE("sum_slots divides the finished sum once") {
  const std::size_t n = 1100;
  std::vector<float> a(n), b(n), out(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = float(i % 5);
    b[i] = 2.0f;
  }
  sum_slots(out.data(), {a.data(), b.data()}, 0, n, 2.0f);
  for (std::size_t i = 0; i < n; ++i) {
    CAPTURE(i);
    CHECK(out[i] == (float(i % 5) + 2.0f) / 2.0f);
  }
}
