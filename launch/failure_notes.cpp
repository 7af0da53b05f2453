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
#include <utility>

#include "common/error.h"

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

FailureNotesFolder::FailureNotesFolder(std::string dir) : dir_(std::move(dir)) {
  if (dir_.empty()) return;
  std::error_code ec;
  fs::remove_all(dir_, ec);
  fs::create_directories(dir_, ec);
  if (ec) throw Error(dir_ + ": cannot create the failure notes' folder: " + ec.message());
}

FailureNotesFolder::~FailureNotesFolder() {
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

FailureOrder order_failures(const std::vector<ExitedProcess>& processes, std::size_t exit_first,
                            const std::vector<FailureNote>& notes) {
  struct Failure {
    std::size_t index;
    std::int64_t ns;
    std::string note;
  };
  std::vector<Failure> failures;
  for (std::size_t i = 0; i < processes.size(); ++i) {
    const ExitedProcess& p = processes[i];
    if (!p.failed) continue;
    const auto note = std::find_if(notes.begin(), notes.end(),
                                   [&](const FailureNote& n) { return n.name == p.name; });
    if (note != notes.end()) {
      failures.push_back({i, note->unix_ns, note->message});
    } else if (i == exit_first) {
      failures.push_back({i, p.exited_ns, ""});  // said nothing: its exit is its failure
    }
  }
  std::sort(failures.begin(), failures.end(),
            [](const Failure& a, const Failure& b) { return a.ns < b.ns; });
  if (failures.empty()) return {exit_first, "", ""};
  std::string after;
  for (std::size_t i = 1; i < failures.size(); ++i) {
    after += (after.empty() ? "; then " : ", ") + processes[failures[i].index].name + " (+" +
             seconds_text(std::chrono::nanoseconds(failures[i].ns - failures[0].ns)) + ")";
  }
  if (!after.empty()) after += " failed after it";
  return {failures[0].index, failures[0].note, after};
}

}  // namespace gradsync
