#include <doctest/doctest.h>
#include <stdlib.h>

#include <fstream>
#include <vector>
#include <string>

#include "launch/failure_notes.h"
#include "tests/support/temp_dir.h"

TEST_CASE("failure notes: a process's first failure is kept with its time, earliest read first") {
  gradsync::testing::TempDir dir;
  // Another process's note, written long ago, as a shell or an older gradsync would leave it.
  std::ofstream(dir.file("rank 1.txt")) << "1000\nrank 1: lost rank 0\n";
  std::ofstream(dir.file("garbage.txt")) << "not a time\nwhatever\n";
  ::setenv(gradsync::kFailureDirEnv, dir.path().string().c_str(), 1);
  ::setenv(gradsync::kProcessNameEnv, "rank 0", 1);
  const std::int64_t before = gradsync::unix_now_ns();
  gradsync::note_failure("rank 0: No space left on device");
  gradsync::note_failure("a consequence, later: not kept");
  ::unsetenv(gradsync::kFailureDirEnv);
  ::unsetenv(gradsync::kProcessNameEnv);
  const auto notes = gradsync::read_failure_notes(dir.path().string());
  REQUIRE(notes.size() == 2);  // the garbage note is skipped
  CHECK(notes[0].name == "rank 1");
  CHECK(notes[0].unix_ns == 1000);
  CHECK(notes[1].name == "rank 0");
  CHECK(notes[1].message == "rank 0: No space left on device");
  CHECK(notes[1].unix_ns >= before);
  CHECK(gradsync::read_failure_notes(dir.file("missing")).empty());
}

TEST_CASE("failure notes: the earliest failure is first, the exit of a silent one counts too") {
  using gradsync::ExitedProcess;
  const std::vector<ExitedProcess> processes = {{"rank 0", true, 900'000'000},
                                                {"rank 1", true, 950'000'000},
                                                {"rank 2", true, 700'000'000},  // killed, silent
                                                {"rank 3", false, 990'000'000}};
  const std::vector<gradsync::FailureNote> notes = {{"rank 1", 500'000'000, "disk full"},
                                                    {"rank 0", 800'000'000, "lost rank 1"}};
  // rank 2 exited first, but rank 1 noted its failure before that.
  auto order = gradsync::order_failures(processes, 2, notes);
  CHECK(order.first == 1);
  CHECK(order.note == "disk full");
  CHECK(order.after == "; then rank 2 (+0.2 s), rank 0 (+0.3 s) failed after it");
  // Without notes, the first exit is the failure, and nothing is listed after it.
  order = gradsync::order_failures(processes, 2, {});
  CHECK(order.first == 2);
  CHECK(order.note.empty());
  CHECK(order.after.empty());
}
