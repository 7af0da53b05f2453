#include "common/failure_note.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>

namespace gradsync {
namespace fs = std::filesystem;

std::int64_t unix_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void note_failure(const std::string& message) {
  static std::atomic<bool> written{false};
  const char* dir = std::getenv(kFailureDirEnv);
  if (dir == nullptr || *dir == '\0' || written.exchange(true)) return;
  const std::int64_t now = unix_now_ns();  // before any file work: the failure's time
  const char* name = std::getenv(kProcessNameEnv);
  const std::string file =
      (name != nullptr && *name != '\0') ? name : "pid " + std::to_string(::getpid());
  const std::string text = std::to_string(now) + "\n" + message + "\n";
  // O_EXCL: processes that share a name (the ranks under one mpirun) keep the first note.
  const std::string path = (fs::path(dir) / (file + ".txt")).string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const ssize_t n = ::write(fd, text.data(), text.size());
  ::close(fd);
  // A partial note (a full disk) would mislead: remove it, the error line still says it all.
  if (n != static_cast<ssize_t>(text.size())) ::unlink(path.c_str());
}

}  // namespace gradsync
