#include "launch/failure_notes.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

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

std::vector<FailureNote> read_failure_notes(const std::string& dir) {
  std::vector<FailureNote> notes;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() != ".txt") continue;
    std::ifstream in(it->path());
    FailureNote note;
    std::string time;
    if (!std::getline(in, time) || !std::getline(in, note.message)) continue;
    try {
      note.unix_ns = std::stoll(time);
    } catch (const std::exception&) {
      continue;
    }
    note.name = it->path().stem().string();
    notes.push_back(std::move(note));
  }
  std::sort(notes.begin(), notes.end(),
            [](const FailureNote& a, const FailureNote& b) { return a.unix_ns < b.unix_ns; });
  return notes;
}

}  // namespace gradsync
