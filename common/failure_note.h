// A failure note: how a process of a run tells its launcher when it first failed and why, so
// that the launcher's last line names the earliest real failure rather than the first process
// to exit (launch/failure_notes.h reads them).
//
//   // the launcher sets, per child: GRADSYNC_FAILURE_DIR=<dir> GRADSYNC_PROCESS_NAME=rank 2
//   note_failure("rank 2 ...: No space left on device");   // before telling any peer
//
// One file per process, <dir>/<name>.txt: the wall-clock time in nanoseconds since the epoch
// (CLOCK_REALTIME: comparable across the processes of a host, and across hosts as far as their
// clocks agree), a newline, and the one-line error. Only a process's first note is kept; writing
// is best effort (a full disk must not turn the real error into another) and never throws.
#pragma once

#include <cstdint>
#include <string>

namespace gradsync {

inline constexpr const char* kFailureDirEnv = "GRADSYNC_FAILURE_DIR";
inline constexpr const char* kProcessNameEnv = "GRADSYNC_PROCESS_NAME";

// Nanoseconds since the epoch, now (the notes' clock).
std::int64_t unix_now_ns();

// Writes this process's note when the launcher asked for notes (kFailureDirEnv set) and none
// was written yet. Never throws.
void note_failure(const std::string& message);

}  // namespace gradsync
