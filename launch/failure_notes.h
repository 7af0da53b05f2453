// Failure notes: how the processes of one run tell their launcher when each first failed and
// why, so that the launcher's last line names the earliest real failure rather than the first
// process to exit (a rank that fills a disk may still be writing its trace when a peer, which
// only lost its connection, has already exited).
//
//   // in the launcher, per child:  GRADSYNC_FAILURE_DIR=<run>/failures GRADSYNC_PROCESS_NAME=rank 2
//   note_failure("rank 2 ...: No space left on device");   // the child's top-level catch
//   for (const FailureNote& n : read_failure_notes(dir)) ...   // the launcher, after the exits
//
// One file per process, <dir>/<name>.txt: the wall-clock time in nanoseconds since the epoch
// (CLOCK_REALTIME: comparable across the processes of a host, and across hosts as far as their
// clocks agree), a newline, and the one-line error. Only a process's first note is kept; writing
// is best effort (a full disk must not turn the real error into another) and never throws.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gradsync {

inline constexpr const char* kFailureDirEnv = "GRADSYNC_FAILURE_DIR";
inline constexpr const char* kProcessNameEnv = "GRADSYNC_PROCESS_NAME";

struct FailureNote {
  std::string name;     // "rank 2", "server 0": the launcher's name for the process
  std::int64_t unix_ns = 0;
  std::string message;  // the error line, without "gradsync: error: "
};

// Nanoseconds since the epoch, now (the notes' clock).
std::int64_t unix_now_ns();

// Writes this process's note when the launcher asked for notes (kFailureDirEnv set) and none
// was written yet. Never throws.
void note_failure(const std::string& message);

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
