// The local launcher: starts one process per rank (as torchrun --standalone does), relays
// their output line by line with a "[rank R] " prefix, and tears everything down when one
// fails.
//
// Guarantees: when any process exits non-zero or is killed (unless it is expendable, see
// ProcessSpec), every other process is sent SIGTERM, then SIGKILL after `grace`; launch() then
// throws gradsync::Error naming the first process that failed and its exit code (with the last line it printed: its one-line error) or
// its signal. SIGINT or SIGTERM to the launcher stops the processes the same way, and launch()
// throws "interrupted by SIGINT", so that the caller cleans up (network namespaces) instead of
// dying with them. Children are tied to the launcher with PR_SET_PDEATHSIG, so even a launcher
// killed with SIGKILL leaves no orphans. Blocks until all processes have exited, and reads their
// output for at most 1 s more (a background job of a process may hold it open). A process that
// outlives SIGKILL by another `grace` (stuck in the kernel) is named in the Error instead of
// waited for.
#pragma once

#include <signal.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace gradsync {

struct ProcessSpec {
  std::string name;                                      // "rank 2", "server 0"
  std::vector<std::string> argv;                         // argv[0] is the executable path
  std::vector<std::pair<std::string, std::string>> env;  // added to the launcher's environment
  std::vector<std::string> unset{};  // removed from it (a launcher's variables that would mislead)
  // On failure the first line holding the first of these markers that appeared is quoted,
  // instead of the last line: mpirun relays every rank's output and then closing notes, so its
  // last line is boilerplate while the first rank's "gradsync: error:" line, or mpirun's
  // "noticed that process rank N ... signal 9", says what happened.
  std::vector<std::string> blame_markers{};
  // A process the run can lose (a parameter-server worker under
  // ps.continue_without_dead_workers: its shards drop it and serve the others). Its failure is
  // said in one line and stops nothing; once every other process has exited successfully, an
  // expendable one still running after `grace` (stopped, hung, or dropped while it slept) is
  // killed and said to be, and launch() returns normally.
  bool expendable = false;
  // Descriptors it inherits, at the same numbers: a listening socket the launcher bound for it
  // and kept bound, so that no other process can take the port between choosing and listening
  // (rank 0's store: GRADSYNC_STORE_FD).
  std::vector<int> keep_fds{};
};

struct LaunchOptions {
  std::chrono::milliseconds grace{3000};  // SIGTERM -> SIGKILL
  // Where the processes leave their failure notes (launch/failure_notes.h; created empty,
  // removed when launch() returns or throws); empty: none. With notes, a failure names the process that failed first by
  // its note's time (or its exit's, for one killed without a word), not the first to exit, and
  // lists the processes that failed after it on their own.
  std::string failure_dir{};
};

void launch(const std::vector<ProcessSpec>& processes, const LaunchOptions& options);

// Catches SIGINT and SIGTERM while it lives (unless they are ignored, as under nohup), so that
// launch() stops its processes and throws instead of the launcher dying at once. launch() holds
// one; a caller that makes things to undo before and after launch() (network namespaces) holds
// one around all of it, so an interrupt during its set-up is not lost either: launch() sees it
// as soon as it starts. Guards nest (the outermost one catches); one thread only.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

// The path of the running executable (/proc/self/exe), to start `gradsync worker` children.
std::string current_executable();

}  // namespace gradsync
