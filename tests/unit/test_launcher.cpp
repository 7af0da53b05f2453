// The local launcher's teardown, on small shell processes: the first failure is named and
// stops the others; one that ignores SIGTERM is killed after the grace; a background job that
// keeps a process's output open does not hold the launcher; SIGINT stops them all.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include "common/error.h"
#include "experiments/launcher.h"

namespace gradsync {
namespace {

using namespace std::chrono_literals;

ProcessSpec shell(const std::string& name, const std::string& script) {
  return {name, {"/bin/sh", "-c", script}, {}};
}

// Runs launch(); returns its error ("" when it returned) and how long it took in seconds.
std::pair<std::string, double> timed_launch(const std::vector<ProcessSpec>& processes,
                                            std::chrono::milliseconds grace) {
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  try {
    launch(processes, LaunchOptions{grace});
  } catch (const Error& e) {
    error = e.what();
  }
  return {error, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

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

TEST_CASE("launcher: a process that ignores SIGTERM is killed after the grace") {
  // The ignored SIGTERM is inherited by sleep, which also keeps the output open once sh is
  // killed: the drain's 1 s bound ends that wait.
  const auto [error, took] = timed_launch(
      {shell("rank 0", "trap '' TERM; sleep 60; exit 0"), shell("rank 1", "exit 1")}, 300ms);
  CHECK(error.starts_with("rank 1 (pid "));
  CHECK(error.ends_with(") exited with code 1; stopped the other 1 process(es)"));
  CHECK(took >= 0.3);
  CHECK(took < 10.0);
}

TEST_CASE("launcher: a background job holding the output does not hold the launcher") {
  const auto [error, took] = timed_launch({shell("rank 0", "sleep 60 & echo started")}, 3000ms);
  CHECK(error == "");
  CHECK(took < 10.0);  // 1 s of draining, then it returns: not the job's 60 s
}

TEST_CASE("launcher: SIGINT stops every process and launch() throws, so its caller cleans up") {
  std::jthread interrupt([] {
    std::this_thread::sleep_for(300ms);
    ::kill(::getpid(), SIGINT);  // launch()'s handler takes it, whichever thread it reaches
  });
  const auto [error, took] =
      timed_launch({shell("rank 0", "exec sleep 60"), shell("rank 1", "exec sleep 60")}, 3000ms);
  CHECK(error == "interrupted by SIGINT; stopped the 2 process(es)");
  CHECK(took < 2.5);  // at their SIGTERM, not after the grace
}

}  // namespace gradsync
