// How gradsync's processes use glibc's malloc: freed memory stays mapped for reuse.
//
//   int main() { gradsync::keep_freed_memory_mapped(); ... }   // once, before any thread starts
//
// Why: ZeroMQ gives every large message it receives a fresh buffer, allocated on its I/O thread
// (one per 512 KiB chunk of a push or a reply), and we free it moments later, after the update
// or the copy into the parameters. With glibc's defaults the trim threshold follows the largest
// block freed so far (about 1 MiB here), so whenever more than that lies free at the top of the
// I/O thread's arena, the pages go back to the kernel and the next chunks fault in zeroed pages
// again. At 16M floats that was a page fault and a page clear for most of the 128 MiB a ps round
// trip receives: perf put faults and page clears at 10% of its cycles, against 1.5% for a raw
// echo of the same chunks, and with this policy the round trip took 1.3x less time (alternating
// runs of both builds: `gradsync bench ps --floats 16M --round-seconds 0.4`, 55 and 50 ms
// before, 42 and 37 ms after). libzmq 4.3 has no hook for the allocation of its receive
// buffers, so the process's allocator is where this is set.
//
// What it costs: freed memory stays with the process for reuse instead of going back to the
// kernel at once. The main arena returns what lies free at its top beyond kTrimThresholdBytes;
// a thread's arena (heaps of at most 64 MiB each) keeps what it used while the heap lives.
// Blocks below kMmapThresholdBytes come from the arenas rather than from mmap.
//
// Returns false, changing nothing, where glibc's malloc is not the one in use: in a sanitizer
// build (ASan and TSan bring their own allocators) and with other C libraries.
#pragma once

#include <cstddef>

namespace gradsync {

inline constexpr std::size_t kTrimThresholdBytes = std::size_t{128} << 20;
// glibc's own ceiling for its dynamic threshold on 64-bit, and the largest it accepts.
inline constexpr std::size_t kMmapThresholdBytes = std::size_t{32} << 20;

bool keep_freed_memory_mapped();

}  // namespace gradsync
