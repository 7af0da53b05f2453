// Waiting on a word in shared memory across processes: a futex (Linux), the way NCCL's and
// Open MPI's shared-memory transports sleep once spinning stops paying.
//
//   futex_wait(&cell.phase, seen, std::chrono::milliseconds(10));   // sleeps while unchanged
//   futex_wake_all(&cell.phase);                                    // after changing it
//
// The words are std::atomic<std::uint32_t> placed in a MAP_SHARED mapping (lock-free, the
// size and layout of a uint32_t), and the futexes are not PRIVATE, so a waiter in one process
// is woken by a store in another.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace gradsync::shm {

// Sleeps while *word == expected, for at most `for_at_most`; returns at once if it differs,
// and early on a wake (or a signal). The caller re-checks what it waits for.
void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                std::chrono::nanoseconds for_at_most);
void futex_wake_all(std::atomic<std::uint32_t>* word);

// Whether process `pid` still runs: false once it is gone or a zombie (dead, not yet reaped).
bool process_alive(int pid);

// A CPU hint inside spin loops (x86 pause), so a spinning rank yields its core's pipeline.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace gradsync::shm
