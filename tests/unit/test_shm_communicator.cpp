// ShmCommunicator: N ranks as N threads of this process, one shared-memory segment, joined
// through one InMemoryStore. Expected values are known in closed form (tests/support/
// ring_ranks.h): rank r holds r + 1 + i % 7 at element i, so every sum is exact in any order.
// Small chunks (4 KiB) make the buffers cross many chunk steps and both sets of slots.
#include <dirent.h>
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "allreduce/in_memory_store.h"
#include "allreduce/shm/shm_communicator.h"
#include "allreduce/shm/shm_segment.h"
#include "common/error.h"
#include "common/run_id.h"
#include "tests/support/allreduce_into_checks.h"
#include "tests/support/collective_value_checks.h"
#include "tests/support/reduce_scatter_checks.h"
#include "tests/support/ring_ranks.h"

using namespace gradsync::testing;
using namespace std::chrono_literals;
using gradsync::ReduceOp;

namespace {

gradsync::ShmOptions shm_options(std::size_t chunk_bytes = 4096,
                                 std::chrono::milliseconds timeout = 10s) {
  gradsync::ShmOptions options;
  options.chunk_bytes = chunk_bytes;
  options.timeout = timeout;
  options.run_id = 0x5e5e0000ull + chunk_bytes;
  return options;
}

// Names in /dev/shm that a run with this id left.
int segments_left(std::uint64_t run_id) {
  const std::string prefix = "gradsync-" + gradsync::run_id_text(run_id) + "-";
  int found = 0;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) {
      if (std::string(e->d_name).rfind(prefix, 0) == 0) ++found;
    }
    closedir(dir);
  }
  return found;
}

}  // namespace

TEST_CASE("shm: every collective is exact for 1..6 ranks and awkward lengths") {
  for (std::size_t chunk : {std::size_t(4096), std::size_t(1) << 20}) {
    for (int n = 1; n <= 6; ++n) {
      CAPTURE(chunk);
      CAPTURE(n);
      const std::vector<std::size_t> lengths = {0, 1, std::size_t(n + 1), 4097, 1000003};
      const int root = n - 1;
      gradsync::InMemoryStore store;
      run_ranks(n, [&](int r) {
        auto comm = gradsync::make_shm_communicator(store, r, n, shm_options(chunk));
        CHECK(comm->rank() == r);
        CHECK(comm->size() == n);
        for (std::size_t length : lengths) check_collectives_once(*comm, length, root);
        CHECK(comm->counters().collectives == 5 * lengths.size());
      });
      CHECK(segments_left(shm_options(chunk).run_id) == 0);
    }
  }
}

TEST_CASE("shm: reduce-scatter and out-of-place allreduce match the allreduce bit for bit") {
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    gradsync::InMemoryStore store;
    run_ranks(n, [&](int r) {
      auto comm = gradsync::make_shm_communicator(store, r, n, shm_options());
      for (std::size_t block : reduce_scatter_blocks(n)) check_reduce_scatter(*comm, block);
      for (std::size_t length : allreduce_into_lengths(n)) check_allreduce_into(*comm, length);
      check_allreduce_into_refusals(*comm);
    });
  }
}

TEST_CASE("shm: ranks end with the same bits on non-integer data") {
  const int n = 3;
  const std::size_t length = 100003;
  gradsync::InMemoryStore store;
  std::vector<std::vector<float>> got(n);
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_shm_communicator(store, r, n, shm_options(65536));
    // Sums that round differently in different orders.
    got[std::size_t(r)].resize(length);
    for (std::size_t i = 0; i < length; ++i) {
      got[std::size_t(r)][i] = 0.1f * float(r + 1) / float(i + 3);
    }
    comm->allreduce(got[std::size_t(r)], ReduceOp::kAvg);
  });
  CHECK(got[1] == got[0]);
  CHECK(got[2] == got[0]);
}

TEST_CASE("shm: a rank that never comes is named within the timeout, and nobody hangs") {
  const int n = 3;
  gradsync::InMemoryStore store;
  std::vector<std::string> errors(n);
  const auto start = Clock::now();
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_shm_communicator(store, r, n, shm_options(4096, 600ms));
    std::vector<float> data = rank_data(r, 5000);
    comm->allreduce(data, ReduceOp::kSum);  // everyone: fine
    if (r == 2) return;                     // rank 2 leaves without its second allreduce
    try {
      comm->allreduce(data, ReduceOp::kSum);
    } catch (const gradsync::Error& e) {
      errors[std::size_t(r)] = e.what();
    }
  });
  CHECK(ms_since(start) < 5000);
  for (int r = 0; r < 2; ++r) {
    CAPTURE(errors[std::size_t(r)]);
    CHECK(errors[std::size_t(r)].find("rank 2") != std::string::npos);
  }
}

TEST_CASE("shm: ranks in different collectives fail with a desync naming both") {
  const int n = 2;
  gradsync::InMemoryStore store;
  std::vector<std::string> errors(n);
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_shm_communicator(store, r, n, shm_options(4096, 5s));
    std::vector<float> data = rank_data(r, r == 0 ? 100 : 200);
    try {
      comm->allreduce(data, ReduceOp::kSum);
    } catch (const gradsync::Error& e) {
      errors[std::size_t(r)] = e.what();
    }
  });
  for (int r = 0; r < n; ++r) {
    CAPTURE(errors[std::size_t(r)]);
    CHECK(errors[std::size_t(r)].find("desync") != std::string::npos);
    CHECK(errors[std::size_t(r)].find("100 floats") != std::string::npos);
    CHECK(errors[std::size_t(r)].find("200 floats") != std::string::npos);
  }
}

TEST_CASE("shm: a rank's abort reaches the others at once, with its reason") {
  const int n = 2;
  gradsync::InMemoryStore store;
  std::string error;
  const auto start = Clock::now();
  run_ranks(n, [&](int r) {
    auto comm = gradsync::make_shm_communicator(store, r, n, shm_options(4096, 20s));
    if (r == 1) {
      std::this_thread::sleep_for(100ms);
      comm->abort("rank 1 failed: its data file is unreadable");
      return;
    }
    std::vector<float> data = rank_data(r, 1000);
    try {
      comm->allreduce(data, ReduceOp::kSum);
    } catch (const gradsync::Error& e) {
      error = e.what();
    }
  });
  CAPTURE(error);
  CHECK(ms_since(start) < 3000);
  CHECK(error.find("its data file is unreadable") != std::string::npos);
}

TEST_CASE("shm: a segment is refused where another layout made it, and leftovers are removed") {
  const std::uint64_t run_id = 0x5e5e0bad;
  const std::string name = gradsync::shm_segment_name(run_id);
  {
    auto made = gradsync::ShmSegment::create(name, 8192);
    CHECK_THROWS_WITH_AS(gradsync::ShmSegment::open(name, 1 << 20), doctest::Contains(name.c_str()),
                         gradsync::Error);
    CHECK_THROWS_AS(gradsync::ShmSegment::create(name, 8192), gradsync::Error);  // O_EXCL
  }
  CHECK(segments_left(run_id) == 0);  // the creator's destructor removed the name
  // What a killed rank 0 would leave: created, never unlinked.
  auto leftover = gradsync::ShmSegment::create(gradsync::shm_segment_name(run_id), 8192);
  CHECK(segments_left(run_id) == 1);
  CHECK(gradsync::remove_run_segments(run_id) == 1);
  CHECK(segments_left(run_id) == 0);
}

TEST_CASE("shm: empty collectives between one-barrier ones keep every rank in step") {
  // An empty collective still takes a barrier: without it a fast rank could describe
  // collective s + 2 while a slow one still checks collective s, a false desync.
  for (int n : {2, 3}) {
    CAPTURE(n);
    gradsync::InMemoryStore store;
    run_ranks(n, [&](int r) {
      auto comm = gradsync::make_shm_communicator(store, r, n, shm_options(4096, 5s));
      std::vector<float> none;
      for (int i = 0; i < 300; ++i) {
        std::vector<float> b(7, r == 0 ? float(i) : -1.0f);
        comm->broadcast(b, 0);
        CHECK(b[6] == float(i));
        comm->allreduce(none, ReduceOp::kSum);
      }
    });
  }
}

TEST_CASE("shm: 0 elements on one rank and some on another is a desync, not a hang") {
  gradsync::InMemoryStore store;
  std::vector<std::string> errors(2);
  run_ranks(2, [&](int r) {
    auto comm = gradsync::make_shm_communicator(store, r, 2, shm_options(4096, 5s));
    std::vector<float> data(r == 0 ? 0 : 10, 1.0f);
    try {
      comm->allreduce(data, ReduceOp::kSum);
    } catch (const gradsync::Error& e) {
      errors[std::size_t(r)] = e.what();
    }
  });
  for (const std::string& e : errors) {
    CAPTURE(e);
    CHECK(e.find("desync") != std::string::npos);
  }
}
