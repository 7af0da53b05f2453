// Starting a child process whose stdout and stderr go to one pipe, and which dies with this
// process (PR_SET_PDEATHSIG): the launcher's ranks and shards, and network.namespaces' `ip`.
//
//   ChildOutput child = spawn_with_output(argv.data(), envp.data(), "cannot start gradsync\n");
//   read(child.output, ...)   // until end of file; then waitpid(child.pid, ...)
//
// argv and envp must be built before the call: between fork and exec the child makes only
// async-signal-safe calls (no allocation, no stdio), since the process may have threads.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace gradsync {

struct ChildOutput {
  pid_t pid = -1;
  int output = -1;  // the pipe's read end (close-on-exec); the caller closes it
};

// argv[0] is the executable; `envp` null: this process's environment and a PATH search for
// argv[0]. When exec fails, the child writes `cannot_start` to the pipe and exits 127. Throws
// Error naming argv[0] when no pipe or process can be made. `keep_fds` stay open across the
// exec, at the same numbers, in this child only (their close-on-exec flag is cleared after the
// fork): a listening socket the parent bound for it.
ChildOutput spawn_with_output(char* const* argv, char* const* envp,
                              const std::string& cannot_start,
                              const std::vector<int>& keep_fds = {});

}  // namespace gradsync
