// The launcher's side of the failure notes (common/failure_note.h writes them): reading them,
// their folder for one launch, and the order of the failures they give.
//
//   for (const FailureNote& n : read_failure_notes(dir)) ...   // after every process exited
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/failure_note.h"

namespace gradsync {

struct FailureNote {
  std::string name;     // "rank 2", "server 0": the launcher's name for the process
  std::int64_t unix_ns = 0;
  std::string message;  // the error line, without "gradsync: error: "
};

// Every note in `dir`, earliest first; a missing folder or an unreadable note is skipped.
std::vector<FailureNote> read_failure_notes(const std::string& dir);

// The launcher's folder of notes for one launch: created empty (a restart must not read the
// attempt before's), removed when this goes, however the launch ends. "" makes nothing.
class FailureNotesFolder {
 public:
  explicit FailureNotesFolder(std::string dir);  // throws Error naming it if it cannot be made
  ~FailureNotesFolder();
  FailureNotesFolder(const FailureNotesFolder&) = delete;
  FailureNotesFolder& operator=(const FailureNotesFolder&) = delete;

 private:
  std::string dir_;
};

// A process as the launcher saw it end.
struct ExitedProcess {
  std::string name;
  bool failed = false;        // a non-zero exit or a signal
  std::int64_t exited_ns = 0;  // when its exit was seen (the notes' clock)
};

struct FailureOrder {
  std::size_t first = 0;  // the process that failed first, by index
  std::string note;       // its note's message, if it left one
  std::string after;      // "; then rank 0 (+0.31 s), rank 2 (+0.4 s) failed after it" or ""
};

// Orders the failed processes by when they failed: a note's time, or, for `exit_first` (the
// first to exit) when it left none (killed by a signal, crashed), the moment its exit was seen.
// Failed processes without a note were stopped by the launcher's teardown (an interrupted
// process leaves none) and are not listed.
FailureOrder order_failures(const std::vector<ExitedProcess>& processes, std::size_t exit_first,
                            const std::vector<FailureNote>& notes);

}  // namespace gradsync
