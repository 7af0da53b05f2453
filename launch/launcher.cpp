#include "launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/progress.h"
#include "common/stopwatch.h"
#include "launch/child_lines.h"
#include "launch/child_process.h"
#include "launch/failure_notes.h"

namespace gradsync {
namespace {

struct Child {
  const ProcessSpec* spec;
  pid_t pid = -1;
  int output = -1;   // read end of the child's stdout + stderr
  int exit_fd = -1;  // a pidfd: readable once the child has exited (-1: not available)
  ChildLines lines;  // its output, relayed; the line a failure quotes
  std::optional<int> status;
  std::int64_t exited_ns = 0;  // when the launcher saw it exit (failure_notes.h's clock)
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "stopped with status " + std::to_string(status);
}

bool failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

constexpr double kDrainSeconds = 1.0;  // output still arriving after every process exited

// The signal an InterruptGuard caught, 0 for none; `guards`: how many are alive (one thread).
volatile std::sig_atomic_t caught = 0;
int guards = 0;

extern "C" void note_interrupt(int signal) { caught = signal; }

// Catches `signal` unless it is ignored (nohup, a background job): what the user chose to
// ignore must not stop the run.
void catch_signal(int signal, struct sigaction& old) {
  sigaction(signal, nullptr, &old);
  if (old.sa_handler == SIG_IGN) return;
  struct sigaction action {};
  action.sa_handler = note_interrupt;
  sigemptyset(&action.sa_mask);
  sigaction(signal, &action, nullptr);
}

extern "C" char** environ;

// argv and envp are built before fork(): between fork and exec the child may call only
// async-signal-safe functions, and malloc (behind setenv, vector growth) is not one of them.
struct ExecImage {
  std::vector<std::string> strings;
  std::vector<char*> argv;
  std::vector<char*> envp;
};

ExecImage exec_image(const ProcessSpec& spec) {
  ExecImage image;
  std::vector<std::string> overridden;
  for (const auto& [key, value] : spec.env) overridden.push_back(key + "=");
  for (const std::string& key : spec.unset) overridden.push_back(key + "=");
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const bool replaced = std::any_of(overridden.begin(), overridden.end(), [&](const auto& p) {
      return entry.compare(0, p.size(), p) == 0;
    });
    if (!replaced) image.strings.push_back(entry);
  }
  for (const auto& [key, value] : spec.env) image.strings.push_back(key + "=" + value);
  const std::size_t env_count = image.strings.size();
  image.strings.insert(image.strings.end(), spec.argv.begin(), spec.argv.end());
  // The strings vector no longer grows, so pointers into it stay valid.
  for (std::size_t i = 0; i < image.strings.size(); ++i) {
    (i < env_count ? image.envp : image.argv).push_back(image.strings[i].data());
  }
  image.envp.push_back(nullptr);
  image.argv.push_back(nullptr);
  return image;
}

Child start(const ProcessSpec& spec) {
  ExecImage image = exec_image(spec);
  const ChildOutput child =
      spawn_with_output(image.argv.data(), image.envp.data(),
                        "cannot start the gradsync executable\n", spec.keep_fds);
  fcntl(child.output, F_SETFL, O_NONBLOCK);
  // Polled beside the outputs, so the loop wakes the moment a process exits and the first to
  // fail is named, not the lowest rank among those found dead at the next sweep. Without
  // pidfds (Linux before 5.3) the 50 ms sweep alone finds exits.
  const int exit_fd = static_cast<int>(syscall(SYS_pidfd_open, child.pid, 0));
  return Child{
      &spec,        child.pid, child.output, exit_fd, ChildLines(spec.name, spec.blame_markers),
      std::nullopt, 0};
}

// Relays what a child printed; at end of stream closes its output.
void relay(Child& child) {
  if (child.lines.relay_from(child.output)) return;
  close(child.output);
  child.output = -1;
}

// Stops reading every child's output (what is still unread is dropped).
void close_outputs(std::vector<Child>& children) {
  for (Child& c : children) {
    if (c.output >= 0) close(c.output);
    c.output = -1;
  }
}

// Closes the pidfds: the launch is over, every child reaped or given up on.
struct ExitFdCloser {
  std::vector<Child>& children;
  ~ExitFdCloser() {
    for (Child& c : children) {
      if (c.exit_fd >= 0) close(c.exit_fd);
    }
  }
};

// SIGTERM goes with a SIGCONT, as service managers send it: a stopped process (SIGSTOP, a
// debugger's) would otherwise hold its SIGTERM pending until the grace's SIGKILL.
void signal_all(std::vector<Child>& children, int sig) {
  for (Child& c : children) {
    if (c.status) continue;
    kill(c.pid, sig);
    if (sig == SIGTERM) kill(c.pid, SIGCONT);
  }
}

}  // namespace

InterruptGuard::InterruptGuard() {
  if (guards++ > 0) return;  // the outer guard catches, and keeps what it caught
  caught = 0;
  catch_signal(SIGINT, old_int_);
  catch_signal(SIGTERM, old_term_);
}

InterruptGuard::~InterruptGuard() {
  if (--guards > 0) return;
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

void launch(const std::vector<ProcessSpec>& given, const LaunchOptions& options) {
  const InterruptGuard guard;  // first: an interrupt while starting is seen in the loop below
  const ProgressLineEnd progress_line_end;  // whichever way this returns
  // The children's specs, with where to leave a failure note and under which name.
  std::vector<ProcessSpec> processes = given;
  // On a terminal the children's progress comes marked, to be drawn in place (at least once a
  // second) rather than as a plain line every 10 s.
  if (isatty(STDERR_FILENO)) {
    for (ProcessSpec& spec : processes) spec.env.emplace_back(kProgressRelayEnv, "1");
  }
  const FailureNotesFolder notes_folder(options.failure_dir);
  if (!options.failure_dir.empty()) {
    for (ProcessSpec& spec : processes) {
      spec.env.emplace_back(kFailureDirEnv, options.failure_dir);
      spec.env.emplace_back(kProcessNameEnv, spec.name);
    }
  }
  std::vector<Child> children;
  children.reserve(processes.size());
  const ExitFdCloser closer{children};
  try {
    for (const ProcessSpec& spec : processes) children.push_back(start(spec));
  } catch (...) {
    signal_all(children, SIGKILL);
    close_outputs(children);
    for (Child& c : children) {
      waitpid(c.pid, nullptr, 0);  // SIGKILL on a process that has only just exec'd: prompt
    }
    throw;
  }

  // Why the processes are being stopped: the process that failed first, or the signal.
  const Child* culprit = nullptr;
  std::string culprit_note;  // its failure note, once the notes are read
  std::string interrupt;
  int interrupted_by = 0;
  // Said at the end, when the culprit's last words have been read: its exit and its error line.
  auto cause = [&] {
    if (culprit == nullptr) return interrupt;
    const std::string who = culprit->spec->name + " (pid " + std::to_string(culprit->pid) + ")";
    // One stopped by the teardown after it failed (still writing its trace, say) is named by
    // its note: the exit says only how the teardown ended it.
    if (!WIFEXITED(*culprit->status) && !culprit_note.empty()) {
      return who + " failed first: " + culprit_note + " (then " +
             describe_status(*culprit->status) + ")";
    }
    std::string text = who + " " + describe_status(*culprit->status);
    // A process that exits with an error says why last; one killed by a signal said nothing.
    if (WIFEXITED(*culprit->status) && !culprit->lines.quoted().empty()) {
      text += " (last said: " + culprit->lines.quoted() + ")";
    }
    return text;
  };
  std::optional<Stopwatch> terminating;  // since the first failure or an interrupt
  std::optional<Stopwatch> killed;       // since SIGKILL
  std::optional<Stopwatch> draining;     // since the last process exited
  std::optional<Stopwatch> leftover;     // since only expendable processes are left running
  bool abandoned = false;                // expendable leftovers killed: not a failure
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Child*> owners;
    for (Child& c : children) {
      if (c.output >= 0) {
        fds.push_back({c.output, POLLIN, 0});
        owners.push_back(&c);
      }
    }
    const std::size_t outputs = fds.size();
    for (Child& c : children) {
      if (c.exit_fd >= 0 && !c.status) fds.push_back({c.exit_fd, POLLIN, 0});
    }
    const bool polled = !fds.empty();
    if (polled) poll(fds.data(), fds.size(), 50);
    for (std::size_t i = 0; i < outputs; ++i) {
      if (fds[i].revents != 0) relay(*owners[i]);
    }
    fds.resize(outputs);
    const bool running =
        std::any_of(children.begin(), children.end(), [](const Child& c) { return !c.status; });
    if (caught != 0 && !terminating && running) {
      interrupted_by = caught;
      interrupt = std::string("interrupted by ") + (caught == SIGINT ? "SIGINT" : "SIGTERM");
      terminating.emplace();
      signal_all(children, SIGTERM);
    }
    bool all_done = true;
    for (Child& c : children) {
      if (c.status) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.status = status;
        c.exited_ns = unix_now_ns();
        if (failed(status) && !terminating && c.spec->expendable) {
          print_line("gradsync: " + c.spec->name + " (pid " + std::to_string(c.pid) + ") " +
                     describe_status(status) + "; the run goes on without it");
        } else if (failed(status) && !terminating) {
          culprit = &c;
          terminating.emplace();
          signal_all(children, SIGTERM);
        }
      } else {
        all_done = false;
      }
    }
    if (all_done && fds.empty()) break;
    if (all_done) {
      // Drain what is left in the pipes, for a moment: a process's own children (a shell's
      // background job) can hold its output open long after it exited.
      if (!draining) draining.emplace();
      if (draining->seconds() < kDrainSeconds) continue;
      close_outputs(children);
      break;
    }
    if (!polled) usleep(20000);  // outputs closed, processes still exiting, no pidfds
    const double grace = std::chrono::duration<double>(options.grace).count();
    // Only expendable processes left, the others all done: they had `grace` to finish too.
    const bool only_expendable_left = std::all_of(
        children.begin(), children.end(), [](auto& c) { return c.status || c.spec->expendable; });
    if (!terminating && only_expendable_left) {
      if (!leftover) leftover.emplace();
      if (leftover->seconds() > grace) {
        for (Child& c : children) {
          if (c.status) continue;
          print_line("gradsync: " + c.spec->name + " (pid " + std::to_string(c.pid) +
                     ") still running " + seconds_text(options.grace) +
                     " after every other process finished (stopped or hung; the run went on "
                     "without it): killed");
          kill(c.pid, SIGKILL);
          abandoned = true;
        }
        terminating.emplace();
        killed.emplace();
      }
    }
    if (terminating && !killed && terminating->seconds() > grace) {
      signal_all(children, SIGKILL);
      killed.emplace();
    }
    if (killed && killed->seconds() > grace) {
      // SIGKILL cannot end a process stuck in the kernel (a hung driver call): say who, rather
      // than wait for ever.
      std::string stuck;
      for (const Child& c : children) {
        if (c.status) continue;
        stuck +=
            (stuck.empty() ? "" : ", ") + c.spec->name + " (pid " + std::to_string(c.pid) + ")";
      }
      close_outputs(children);
      throw Error(cause() + "; " + stuck + " still running " + seconds_text(options.grace) +
                  " after SIGKILL (stuck in the kernel?); gave up waiting");
    }
  }
  if (culprit != nullptr) {
    std::string after;
    if (!options.failure_dir.empty()) {
      std::vector<ExitedProcess> exited;
      for (const Child& c : children) {
        exited.push_back({c.spec->name, c.status && failed(*c.status), c.exited_ns});
      }
      const FailureOrder order = order_failures(exited, std::size_t(culprit - children.data()),
                                                read_failure_notes(options.failure_dir));
      culprit = &children[order.first];
      culprit_note = order.note;
      after = order.after;
    }
    throw Error(cause() + after + "; stopped the other " + std::to_string(children.size() - 1) +
                " process(es)");
  }
  if (terminating && !abandoned) {
    throw Interrupted(interrupted_by, cause() + "; stopped the " + std::to_string(children.size()) +
                                          " process(es)");
  }
}

std::string current_executable() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("cannot find the gradsync executable: " + ec.message());
  return path.string();
}

}  // namespace gradsync
