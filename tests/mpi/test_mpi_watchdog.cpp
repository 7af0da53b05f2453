// MpiWatchdog (allreduce/mpi/mpi_watchdog.h) on its own: no MPI call, only its clock and hooks.
// Every rank of the test job runs these cases alike; the hooks count, and the cases wait for
// events (a hook entered) rather than for times wherever they can, so that a loaded machine
// delays them without failing them.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "allreduce/mpi/mpi_watchdog.h"

using gradsync::mpi::MpiWatchdog;
using namespace std::chrono_literals;
using Clock = MpiWatchdog::Clock;

namespace {

std::string message_of(const std::exception_ptr& error) {
  try {
    if (error) std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("mpi watchdog: beats every heartbeat while watched, never before one or after") {
  std::atomic<int> beats{0}, ends{0};
  MpiWatchdog watchdog(
      50ms, [&] { ++beats; },
      [&](MpiWatchdog::Ending) {
        ++ends;
        return std::exception_ptr();
      });
  // Shorter than a heartbeat: nothing to publish.
  watchdog.watch(Clock::now(), Clock::now() + 10s);
  std::this_thread::sleep_for(5ms);
  CHECK_FALSE(watchdog.unwatch());
  CHECK(beats == 0);
  // About 5 heartbeats: at 50, 100, 150, 200 and 250 ms (fewer if the machine is slow).
  watchdog.watch(Clock::now(), Clock::now() + 10s);
  std::this_thread::sleep_for(275ms);
  CHECK_FALSE(watchdog.unwatch());
  const int watched = beats;
  CHECK(watched >= 2);
  CHECK(watched <= 6);
  std::this_thread::sleep_for(150ms);
  CHECK(beats == watched);  // nothing watched: no beat
  CHECK(ends == 0);
}

TEST_CASE("mpi watchdog: past the deadline it ends the job once, and unwatch waits for that") {
  std::promise<void> entered;
  std::atomic<bool> returned{false};
  std::atomic<int> ends{0};
  std::atomic<bool> timed_out{false};
  MpiWatchdog watchdog(
      10s, [] {},
      [&](MpiWatchdog::Ending ending) {
        timed_out = ending == MpiWatchdog::Ending::kTimedOut;
        if (++ends == 1) entered.set_value();
        std::this_thread::sleep_for(100ms);  // as collecting the others' reports takes a while
        returned = true;
        return std::make_exception_ptr(std::runtime_error("collective #7 timed out"));
      });
  const auto began = Clock::now();
  watchdog.watch(began, began + 50ms);
  REQUIRE(entered.get_future().wait_for(5s) == std::future_status::ready);
  CHECK(Clock::now() - began >= 50ms);
  // The blocked call returns while end() runs: unwatch must not let it go on before end() is
  // through, and then says why the collective failed.
  const std::exception_ptr error = watchdog.unwatch();
  CHECK(returned);
  CHECK(message_of(error) == "collective #7 timed out");
  CHECK(timed_out);
  CHECK(ends == 1);
  // The next collective starts afresh: no old error, no second end.
  watchdog.watch(Clock::now(), Clock::now() + 10s);
  CHECK_FALSE(watchdog.unwatch());
  CHECK(ends == 1);
}

TEST_CASE("mpi watchdog: close ends a watched collective, and nothing else") {
  std::promise<MpiWatchdog::Ending> ended;
  std::atomic<int> ends{0};
  MpiWatchdog watchdog(
      10s, [] {},
      [&](MpiWatchdog::Ending ending) {
        if (++ends == 1) ended.set_value(ending);
        return std::make_exception_ptr(std::runtime_error("destroyed"));
      });
  auto future = ended.get_future();
  watchdog.watch(Clock::now(), Clock::now() + 10s);
  std::this_thread::sleep_for(20ms);
  CHECK(ends == 0);  // neither closed nor late
  watchdog.close();
  REQUIRE(future.wait_for(5s) == std::future_status::ready);
  CHECK(future.get() == MpiWatchdog::Ending::kClosing);
  CHECK(message_of(watchdog.unwatch()) == "destroyed");
  CHECK(ends == 1);
}

TEST_CASE("mpi watchdog: closed with nothing watched, it ends nothing and stops at once") {
  std::atomic<int> ends{0};
  auto watchdog = std::make_unique<MpiWatchdog>(
      10ms, [] {},
      [&](MpiWatchdog::Ending) {
        ++ends;
        return std::exception_ptr();
      });
  watchdog->close();
  std::this_thread::sleep_for(50ms);
  const auto began = Clock::now();
  watchdog.reset();
  CHECK(Clock::now() - began < 1s);
  CHECK(ends == 0);
}
