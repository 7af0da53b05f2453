#include "launch/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace gradsync {

ChildOutput spawn_with_output(char* const* argv, char* const* envp,
                              const std::string& cannot_start, const std::vector<int>& keep_fds) {
  const std::string name = argv[0];
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw Error("cannot start " + name + ": pipe: " + std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error("cannot start " + name + ": fork: " + std::strerror(error));
  }
  if (pid == 0) {
    // Die with the parent, whatever kills it; then become the program.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    for (const int fd : keep_fds) ::fcntl(fd, F_SETFD, 0);  // reads the vector: no allocation
    if (envp != nullptr) {
      ::execve(argv[0], argv, envp);
    } else {
      ::execvp(argv[0], argv);
    }
    [[maybe_unused]] const ssize_t written =
        ::write(STDERR_FILENO, cannot_start.data(), cannot_start.size());
    ::_exit(127);
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

}  // namespace gradsync
