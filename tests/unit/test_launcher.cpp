// The local launcher's teardown, on small shell processes: the first failure is named and
// stops the others, even when another fails right after it; one that ignores SIGTERM is killed
// after the grace; a background job that keeps a process's output open does not hold the launcher;
// SIGINT stops them all; an expendable process (a droppable ps worker) stops nothing.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <string>
#include <thread>

#include "common/error.h"
#include "launch/launcher.h"
#include "tests/support/temp_dir.h"

namespace gradsync {
namespace {

using namespace std::chrono_literals;
using gradsync::testing::TempDir;

ProcessSpec shell(const std::string& name, const std::string& script) {
  return {name, {"/bin/sh", "-c", script}, {}};
}

// Runs launch(); returns its error ("" when it returned) and how long it took in seconds. An
// Interrupted error's signal goes to `interrupted_by`.
std::pair<std::string, double> timed_launch(const std::vector<ProcessSpec>& processes,
                                            std::chrono::milliseconds grace,
                                            int* interrupted_by = nullptr) {
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  try {
    launch(processes, LaunchOptions{grace});
  } catch (const Interrupted& e) {
    error = e.what();
    if (interrupted_by != nullptr) *interrupted_by = e.signal();
  } catch (const Error& e) {
    error = e.what();
  }
  return {error, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

// Gives SIGINT the disposition `handler` (SIG_DFL, SIG_IGN) for the scope's lifetime.
class SigintAs {
 public:
  explicit SigintAs(void (*handler)(int)) {
    struct sigaction action {};
    action.sa_handler = handler;
    sigaction(SIGINT, &action, &old_);
  }
  ~SigintAs() { sigaction(SIGINT, &old_, nullptr); }
  SigintAs(const SigintAs&) = delete;
  SigintAs& operator=(const SigintAs&) = delete;

 private:
  struct sigaction old_ {};
};

}  // namespace

TEST_CASE("launcher: the first failure is named with its last line and stops the others") {
  const auto [error, took] =
      timed_launch({shell("rank 0", "exec sleep 60"),
                    shell("rank 1",
                          "sleep 0.2; echo training; echo 'gradsync: error: no data' >&2; "
                          "exit 3")},
                   3000ms);
  CHECK(error.starts_with("rank 1 (pid "));
  // Its own error line: the whole story in the launcher's last line.
  CHECK(
      error.ends_with(") exited with code 3 (last said: gradsync: error: no data); stopped "
                      "the other 1 process(es)"));
  // rank 0 ends at its SIGTERM, not at the grace's SIGKILL, nor after its 60 s.
  CHECK(took < 2.5);
}

TEST_CASE("launcher: the first to fail is named, not the lowest rank failing just after it") {
  // rank 1 fails first; rank 0 fails 20 ms after rank 1 is dead (a zombie, or already reaped),
  // as a peer does once the connection to a dead process closes. rank 1's background job keeps
  // its output open, so only its exit itself can wake the launcher: a 50 ms sweep of waitpid
  // found both dead together about half the time and named the lowest rank, rank 0.
  TempDir dir;
  const std::string pid_file = dir.file("pid");
  const auto [error, took] = timed_launch(
      {shell("rank 0", "while [ ! -e " + pid_file + " ]; do sleep 0.005; done; p=$(cat " +
                           pid_file +
                           "); while s=$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null) && "
                           "[ \"$s\" != Z ]; do sleep 0.002; done; sleep 0.02; exit 4"),
       shell("rank 1", "sleep 2 & echo $$ > " + pid_file + ".tmp; mv " + pid_file + ".tmp " +
                           pid_file + "; exit 3")},
      3000ms);
  CHECK(error.starts_with("rank 1 (pid "));
  CHECK(error.ends_with(") exited with code 3; stopped the other 1 process(es)"));
  CHECK(took < 2.5);  // the 1 s drain for the background job's output, then done
}

TEST_CASE("launcher: a process that ignores SIGTERM is killed after the grace") {
  // rank 1 fails only once rank 0 ignores SIGTERM, or its SIGTERM could come first. The ignored
  // SIGTERM is inherited by sleep, which also keeps the output open once sh is killed: the
  // drain's 1 s bound ends that wait, long before sleep's 8 s.
  TempDir dir;
  const std::string ready = dir.file("ready");
  const auto [error, took] =
      timed_launch({shell("rank 0", "trap '' TERM; touch " + ready + "; sleep 8; exit 0"),
                    shell("rank 1", "while [ ! -e " + ready + " ]; do sleep 0.01; done; exit 1")},
                   300ms);
  CHECK(error.starts_with("rank 1 (pid "));
  CHECK(error.ends_with(") exited with code 1; stopped the other 1 process(es)"));
  CHECK(took >= 0.3);
  CHECK(took < 6.0);
}

TEST_CASE("launcher: a background job holding the output does not hold the launcher") {
  const auto [error, took] = timed_launch({shell("rank 0", "sleep 8 & echo started")}, 3000ms);
  CHECK(error == "");
  CHECK(took < 6.0);  // 1 s of draining, then it returns: not the job's 8 s
}

TEST_CASE("launcher: SIGINT stops every process and launch() throws, so its caller cleans up") {
  // launch() leaves an ignored SIGINT ignored (nohup; a background job of a script, as CI may
  // run this): the test makes it a plain SIGINT first, and restores it after.
  const SigintAs plain(SIG_DFL);
  TempDir dir;
  const std::string ready = dir.file("ready");
  std::jthread interrupt([&] {
    // Once a process runs, launch() catches SIGINT: its guard comes before the first start.
    while (!std::filesystem::exists(ready)) std::this_thread::sleep_for(10ms);
    ::kill(::getpid(), SIGINT);  // the handler takes it, whichever thread it reaches
  });
  int signal = 0;
  const auto [error, took] = timed_launch(
      {shell("rank 0", "touch " + ready + "; exec sleep 8"), shell("rank 1", "exec sleep 8")},
      3000ms, &signal);
  interrupt.join();
  CHECK(error == "interrupted by SIGINT; stopped the 2 process(es)");
  CHECK(signal == SIGINT);  // an Interrupted error: main exits 130
  CHECK(took < 2.5);        // at their SIGTERM, not after the grace
}

TEST_CASE("launcher: an ignored SIGINT stays ignored") {
  const SigintAs ignored(SIG_IGN);
  std::jthread interrupt([] {
    std::this_thread::sleep_for(100ms);
    ::kill(::getpid(), SIGINT);
  });
  const auto [error, took] = timed_launch({shell("rank 0", "sleep 0.5; exit 0")}, 3000ms);
  interrupt.join();
  CHECK(error == "");  // the run finished as if nothing had been sent
}

TEST_CASE("launcher: an expendable process that fails stops nothing, and the run succeeds") {
  ProcessSpec worker = shell("rank 1", "sleep 0.1; exit 5");
  worker.expendable = true;
  TempDir dir;
  const std::string done = dir.file("done");
  const auto [error, took] = timed_launch(
      {shell("server 0", "sleep 0.6; touch " + done), worker, shell("rank 0", "sleep 0.4")},
      3000ms);
  CHECK(error == "");
  // The server ran to its end: it was not stopped when the worker failed.
  CHECK(std::filesystem::exists(done));
  CHECK(took < 2.5);
}

TEST_CASE("launcher: an expendable process stopped (SIGSTOP) is killed once the others are done") {
  ProcessSpec stopped = shell("rank 1", "kill -STOP $$; exit 0");
  stopped.expendable = true;
  const auto [error, took] =
      timed_launch({shell("server 0", "sleep 0.3"), stopped, shell("rank 0", "sleep 0.2")}, 500ms);
  CHECK(error == "");
  CHECK(took >= 0.5);  // the others' end, then its grace
  CHECK(took < 3.0);
}

TEST_CASE("launcher: a process that is not expendable still stops the expendable ones") {
  ProcessSpec worker = shell("rank 1", "exec sleep 60");
  worker.expendable = true;
  const auto [error, took] =
      timed_launch({shell("server 0", "sleep 0.2; exit 2"), worker}, 3000ms);
  CHECK(error.starts_with("server 0 (pid "));
  CHECK(error.ends_with(") exited with code 2; stopped the other 1 process(es)"));
  CHECK(took < 2.5);
}

// A shell that fails saying `message`, leaving its failure note as gradsync's main does.
std::string note_then(const std::string& message) {
  return "printf '%s\\n%s\\n' \"$(date +%s%N)\" '" + message +
         "' > \"$GRADSYNC_FAILURE_DIR/$GRADSYNC_PROCESS_NAME.txt\"; ";
}

// launch() with failure notes in `notes` (a folder of a TempDir); returns its error.
std::string launch_with_notes(const std::vector<ProcessSpec>& processes,
                              const std::string& notes) {
  LaunchOptions options{3000ms};
  options.failure_dir = notes;
  try {
    launch(processes, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("launcher: the earliest failure note is named, not the first process to exit") {
  // rank 0 fills its disk first but takes 0.6 s to exit (writing its trace); rank 1 loses its
  // connection 0.2 s later and exits at once: the first exit is a consequence.
  TempDir dir;
  const std::string notes = dir.file("failures");
  const std::string error = launch_with_notes(
      {shell("rank 0", note_then("rank 0: No space left on device") +
                           "echo 'gradsync: error: disk full' >&2; sleep 0.6; exit 1"),
       shell("rank 1", "sleep 0.2; " + note_then("rank 0 closed the connection") +
                           "echo 'gradsync: error: lost rank 0' >&2; exit 1")},
      notes);
  // The teardown's SIGTERM ended rank 0 while it slept: its note says why it failed.
  CHECK(error.starts_with("rank 0 (pid "));
  CHECK(error.find(") failed first: rank 0: No space left on device (then was killed by signal "
                   "15 (Terminated)); then rank 1 (+") != std::string::npos);
  CHECK(error.ends_with(" failed after it; stopped the other 1 process(es)"));
  CHECK(!std::filesystem::exists(notes));  // read, then removed
}

TEST_CASE("launcher: a process killed without a word is first when its peers fail after it") {
  TempDir dir;
  const std::string error = launch_with_notes(
      {shell("rank 0", "sleep 0.3; " + note_then("rank 1 closed the connection") + "exit 1"),
       shell("rank 1", "sleep 0.1; kill -9 $$")},
      dir.file("failures"));
  CHECK(error.starts_with("rank 1 (pid "));
  CHECK(error.find("was killed by signal 9") != std::string::npos);
}

TEST_CASE("launcher: a run that succeeds leaves no failure notes' folder either") {
  TempDir dir;
  LaunchOptions options{3000ms};
  options.failure_dir = dir.file("failures");
  launch({shell("rank 0", "exit 0")}, options);
  CHECK(!std::filesystem::exists(options.failure_dir));
}

TEST_CASE("launcher: a stopped process ends at the teardown's SIGTERM, not at the grace") {
  const auto [error, took] = timed_launch(
      {shell("rank 0", "kill -STOP $$; exit 0"), shell("rank 1", "sleep 0.3; exit 1")}, 5000ms);
  CHECK(error.starts_with("rank 1 (pid "));
  CHECK(took < 3.0);  // SIGCONT delivers the SIGTERM at once: not the 5 s grace's SIGKILL
}

TEST_CASE("launcher: a process inherits the descriptors it keeps, and no others") {
  int kept[2], other[2];
  REQUIRE(::pipe2(kept, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(other, O_CLOEXEC) == 0);
  ProcessSpec spec = shell("rank 0", "test -e /proc/$$/fd/" + std::to_string(kept[0]) +
                                         " && ! test -e /proc/$$/fd/" + std::to_string(other[0]));
  spec.keep_fds = {kept[0]};
  const auto [error, took] = timed_launch({spec}, 3000ms);
  CHECK(error == "");
  // Still close-on-exec here: only that child had the flag cleared.
  CHECK((::fcntl(kept[0], F_GETFD) & FD_CLOEXEC) != 0);
  for (const int fd : {kept[0], kept[1], other[0], other[1]}) ::close(fd);
}

}  // namespace gradsync
