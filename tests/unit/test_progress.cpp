#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "common/progress.h"

namespace gradsync {
namespace {

// Collects what a reporter prints through a real FILE*.
class CapturedOutput {
 public:
  CapturedOutput() : file_(open_memstream(&buffer_, &size_)) { REQUIRE(file_ != nullptr); }
  ~CapturedOutput() {
    if (file_ != nullptr) std::fclose(file_);
    std::free(buffer_);
  }
  std::FILE* file() { return file_; }
  std::string text() {
    std::fflush(file_);  // updates buffer_ and size_
    return std::string(buffer_, size_);
  }

 private:
  char* buffer_ = nullptr;
  std::size_t size_ = 0;
  std::FILE* file_;
};

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("progress: format_line shows 1-based step and epoch, rate and ETA") {
  ProgressReporter progress("dp", 9370, 10, 64, ProgressMode::kOff);
  // 1200 steps * 64 samples in 1.2544 s = 61224 samples/s; 8170 steps left at 1.0453 ms each.
  const std::string line = progress.format_line(1199, 1, 0.43123, 1.2544);
  CHECK(line == "[dp] step 1200/9370  epoch 2/10  loss 0.4312  61.2k samples/s  ETA 0:09");
}

TEST_CASE("progress: a resumed run's rate and ETA count only the steps this process ran") {
  // Resumed at step 5000 of 6000: 200 steps of 64 samples in 2 s is 6400 samples/s, and the
  // 800 steps left take 8 s; counting the 5200 steps done would claim 26 times the rate.
  ProgressReporter progress("dp", 6000, 1, 64, ProgressMode::kOff);
  progress.update(5000, 0, 1.0);  // the first step this process ran
  CHECK(progress.format_line(5199, 0, 1.0, 2.0) ==
        "[dp] step 5200/6000  epoch 1/1  loss 1.0000  6.4k samples/s  ETA 0:08");
}

TEST_CASE("progress: rates and ETAs pick their units") {
  ProgressReporter progress("ps", 1000000, 1, 100, ProgressMode::kOff);
  // 1000 steps * 100 samples in 0.08 s = 1.25M samples/s.
  CHECK(progress.format_line(999, 0, 1.0, 0.08).find(" 1.25M samples/s") != std::string::npos);
  // 10 steps * 100 samples in 1.231 s = 812.3 samples/s; 999990 steps left = 34:11:39.
  const std::string slow = progress.format_line(9, 0, 1.0, 1.231);
  CHECK(slow.find(" 812 samples/s") != std::string::npos);
  CHECK(slow.find("ETA 34:11:39") != std::string::npos);
  // Just under 1000 must not round to "1e+03": it moves to the next unit.
  CHECK(progress.format_line(9, 0, 1.0, 1.0002).find(" 1k samples/s") != std::string::npos);
  // Final step: nothing left.
  CHECK(progress.format_line(999999, 0, 1.0, 50.0).find("ETA 0:00") != std::string::npos);
  // Two minutes and five seconds left.
  CHECK(progress.format_line(0, 0, 1.0, 125.0 / 999999.0).find("ETA 2:05") != std::string::npos);
}

TEST_CASE("progress: nothing is printed during the quiet period") {
  CapturedOutput out;
  ProgressReporter progress("dp", 10, 1, 32, ProgressMode::kPlain, out.file(),
                            {.quiet_for_s = 60.0, .plain_interval_s = 0.0});
  for (int step = 0; step < 10; ++step) progress.update(step, 0, 1.0);
  progress.finish();
  CHECK(out.text().empty());
}

TEST_CASE("progress: mode off prints nothing") {
  CapturedOutput out;
  ProgressReporter progress("dp", 10, 1, 32, ProgressMode::kOff, out.file(),
                            {.quiet_for_s = 0.0, .plain_interval_s = 0.0});
  for (int step = 0; step < 10; ++step) progress.update(step, 0, 1.0);
  progress.finish();
  CHECK(out.text().empty());
}

TEST_CASE("progress: plain mode writes whole lines") {
  CapturedOutput out;
  ProgressReporter progress("local", 4, 2, 32, ProgressMode::kPlain, out.file(),
                            {.quiet_for_s = 0.0, .plain_interval_s = 0.0});
  for (int step = 0; step < 4; ++step) progress.update(step, step / 2, 0.5);
  progress.finish();  // plain lines already end in "\n": nothing more
  const std::string text = out.text();
  CHECK(count(text, "\n") == 4);
  CHECK(count(text, "\r") == 0);
  CHECK(text.rfind("[local] step 1/4  epoch 1/2  loss 0.5000  ", 0) == 0);
  CHECK(text.find("[local] step 4/4  epoch 2/2") != std::string::npos);
  CHECK(text.back() == '\n');
}

TEST_CASE("progress: plain mode honours its interval") {
  CapturedOutput out;
  ProgressReporter progress("local", 100, 1, 32, ProgressMode::kPlain, out.file(),
                            {.quiet_for_s = 0.0, .plain_interval_s = 60.0});
  for (int step = 0; step < 100; ++step) progress.update(step, 0, 0.5);
  CHECK(count(out.text(), "\n") == 1);  // the first eligible step only
}

TEST_CASE("progress: terminal mode redraws in place and ends the line") {
  CapturedOutput out;
  ProgressReporter progress("dp", 50, 1, 32, ProgressMode::kTerminal, out.file(),
                            {.quiet_for_s = 0.0, .redraw_interval_s = 60.0});
  for (int step = 0; step < 50; ++step) progress.update(step, 0, 0.5);
  std::string text = out.text();
  // Drawn at the first step, then not within the redraw interval, then always at the final step.
  CHECK(count(text, "\r") == 2);
  CHECK(count(text, "\n") == 0);
  CHECK(text.find("step 1/50") != std::string::npos);
  CHECK(text.find("step 50/50") != std::string::npos);
  // Padded so a shorter line hides what a longer one left behind.
  const std::string last = text.substr(text.rfind('\r') + 1);
  CHECK(last.size() >= 79);
  CHECK(last.back() == ' ');
  progress.finish();
  progress.finish();  // idempotent
  text = out.text();
  CHECK(count(text, "\n") == 1);
  CHECK(text.back() == '\n');
}

TEST_CASE("progress: terminal mode redraws every step once its interval has passed") {
  CapturedOutput out;
  ProgressReporter progress("dp", 5, 1, 32, ProgressMode::kTerminal, out.file(),
                            {.quiet_for_s = 0.0, .redraw_interval_s = 0.0});
  for (int step = 0; step < 5; ++step) progress.update(step, 0, 0.5);
  const std::string text = out.text();
  CHECK(count(text, "\r") == 5);
  for (const char* step : {"step 1/5", "step 2/5", "step 3/5", "step 4/5", "step 5/5"}) {
    CHECK(text.find(step) != std::string::npos);
  }
}

TEST_CASE("progress: terminal finish prints nothing when nothing was drawn") {
  CapturedOutput out;
  ProgressReporter progress("dp", 5, 1, 32, ProgressMode::kTerminal, out.file(),
                            {.quiet_for_s = 60.0});
  for (int step = 0; step < 5; ++step) progress.update(step, 0, 0.5);
  progress.finish();
  CHECK(out.text().empty());
}

TEST_CASE("progress: auto mode on a file (not a tty) prints plain lines") {
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  ProgressReporter progress("dp", 2, 1, 32, ProgressMode::kAuto, file,
                            {.quiet_for_s = 0.0, .plain_interval_s = 0.0});
  progress.update(0, 0, 1.0);
  progress.update(1, 0, 1.0);
  progress.finish();
  std::rewind(file);
  std::string text;
  for (int c = std::fgetc(file); c != EOF; c = std::fgetc(file))
    text.push_back(static_cast<char>(c));
  std::fclose(file);
  CHECK(count(text, "\n") == 2);
  CHECK(count(text, "\r") == 0);
}

TEST_CASE("progress: parse_progress_mode") {
  CHECK(parse_progress_mode("auto") == ProgressMode::kAuto);
  CHECK(parse_progress_mode("terminal") == ProgressMode::kTerminal);
  CHECK(parse_progress_mode("plain") == ProgressMode::kPlain);
  CHECK(parse_progress_mode("off") == ProgressMode::kOff);
  CHECK_THROWS_WITH_AS(parse_progress_mode("fancy"),
                       doctest::Contains("auto, terminal, plain, off"), Error);
  CHECK_THROWS_WITH_AS(parse_progress_mode("fancy"), doctest::Contains("'fancy'"), Error);
  CHECK_THROWS_AS(parse_progress_mode(""), Error);
}

}  // namespace gradsync
