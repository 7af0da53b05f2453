#include "launch/failure_notes.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "common/error.h"

namespace gradsync {
namespace fs = std::filesystem;

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
