#include <doctest/doctest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common/malloc_policy.h"

namespace {

// Minor page faults of the calling thread so far.
long thread_minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

}  // namespace

TEST_CASE("keep_freed_memory_mapped: receive buffers freed and allocated again do not fault") {
  // As gradsync's main() does; this test process keeps the policy for the tests that follow.
  if (!gradsync::keep_freed_memory_mapped()) {
    MESSAGE("skipped: the allocator in use is not glibc's (a sanitizer build)");
    return;
  }
  // What ZeroMQ's I/O thread does with a 16 MiB payload arriving in 512 KiB chunks: a fresh
  // buffer per chunk, filled from the socket, freed once the payload was used; then the next.
  constexpr std::size_t kChunk = std::size_t{512} << 10;
  constexpr int kChunks = 32;
  constexpr int kPayloads = 4;
  long faults_after_first = 0;
  bool allocated = false;
  std::thread io([&] {
    long at_first_end = 0;
    for (int p = 0; p < kPayloads; ++p) {
      std::vector<void*> chunks;
      for (int c = 0; c < kChunks; ++c) {
        void* chunk = std::malloc(kChunk);
        if (chunk == nullptr) return;  // allocated stays false
        std::memset(chunk, p + 1, kChunk);
        chunks.push_back(chunk);
      }
      for (void* chunk : chunks) std::free(chunk);
      if (p == 0) at_first_end = thread_minor_faults();
    }
    faults_after_first = thread_minor_faults() - at_first_end;
    allocated = true;
  });
  io.join();
  REQUIRE(allocated);
  // The first payload faults its pages in (4096 pages); later ones reuse them. With glibc's
  // default thresholds each later payload faulted most of its pages again.
  constexpr long kPages = static_cast<long>(kChunk / 4096) * kChunks;
  CHECK(faults_after_first < kPages / 20);
}
