#include "allreduce/shm/shm_wait.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <ctime>

static_assert(std::atomic<std::uint32_t>::is_always_lock_free &&
                  sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t),
              "a futex word must be a plain 32-bit word");

namespace gradsync::shm {

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                std::chrono::nanoseconds for_at_most) {
  if (for_at_most.count() <= 0) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(for_at_most.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(for_at_most.count() % 1000000000);
  // EAGAIN (the word changed), ETIMEDOUT and EINTR all mean: look again.
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr,
            0);
}

void futex_wake_all(std::atomic<std::uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr,
            nullptr, 0);
}

bool process_alive(int pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  // kill() succeeds on a zombie: read its state ("pid (comm) S ..."; comm may hold spaces and
  // parentheses, so the state is the first field after the last ')').
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return errno != ENOENT;  // another reason (permissions): assume alive
  char buf[512];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* close = nullptr;
  for (const char* p = buf; *p != '\0'; ++p) {
    if (*p == ')') close = p;
  }
  if (close == nullptr || close[1] == '\0' || close[2] == '\0') return true;
  return close[2] != 'Z' && close[2] != 'X';
}

}  // namespace gradsync::shm
