// The progress line a person watches during a run.
//
// On a terminal (stderr is a tty) it redraws one line in place ("\r") at most every
// `redraw_interval_s` (0.25 s):
//   [dp] step 1200/9370  epoch 2/10  loss 0.4312  61.2k samples/s  ETA 0:41
// When stderr is not a terminal (CI, a pipe, a log file) it prints a plain line every
// `plain_interval_s` (10 s) instead. A worker process whose launcher draws on a terminal
// (kProgressRelayEnv set, launch/launcher.h) prints relayed lines: each starts with
// kProgressMark, every `relay_interval_s` (0.5 s), and the launcher redraws them in place. Nothing
// is printed for runs shorter than `quiet_for_s` (2 s), so short runs and tests stay silent. Mode
// "off" prints nothing. Not thread-safe: only one rank (rank 0) reports.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "common/stopwatch.h"

namespace gradsync {

enum class ProgressMode { kAuto, kTerminal, kPlain, kRelayed, kOff };

// Set by a launcher whose stderr is a terminal for the processes whose output it relays: their
// progress lines come to it marked (ProgressMode::kRelayed) so that it can draw them in place.
inline constexpr const char* kProgressRelayEnv = "GRADSYNC_PROGRESS_RELAY";
// The first byte of a relayed progress line (ASCII record separator: never in other output).
inline constexpr char kProgressMark = '\x1e';

// When lines are printed, in seconds.
struct ProgressTiming {
  double quiet_for_s = 2.0;         // nothing before this long after the reporter was made
  double plain_interval_s = 10.0;   // at least this long between plain lines
  double redraw_interval_s = 0.25;  // ... and between terminal redraws: smooth enough to watch
  double relay_interval_s = 0.5;    // ... and between relayed lines (at least one a second)
};

// "auto" | "terminal" | "plain" | "off"; throws gradsync::Error listing the valid names.
ProgressMode parse_progress_mode(const std::string& name);
// The mode a worker process uses for `configured`: kRelayed where its launcher asked for it
// (kProgressRelayEnv) and the configuration leaves it to the terminal (auto, terminal).
ProgressMode relayed_if_asked(ProgressMode configured);

class ProgressReporter {
 public:
  ProgressReporter(std::string label, std::int64_t total_steps, std::int64_t epochs,
                   std::int64_t samples_per_step, ProgressMode mode, std::FILE* out = stderr,
                   ProgressTiming timing = {});

  // Called after every step (0-based `step` just finished), from the first step this process
  // runs (a resumed run's first step is past 0). Cheap when nothing is printed.
  void update(std::int64_t step, std::int64_t epoch, double loss);
  // Ends the line on a terminal (so later output starts on a fresh line).
  void finish();

  // The text of the line for these values (exposed for tests).
  std::string format_line(std::int64_t step, std::int64_t epoch, double loss,
                          double elapsed_s) const;

 private:
  std::string label_;
  std::int64_t total_steps_;
  std::int64_t epochs_;
  std::int64_t samples_per_step_;
  ProgressMode mode_;
  std::FILE* out_;
  ProgressTiming timing_;
  Stopwatch clock_;
  std::optional<std::int64_t> first_step_;  // the first step update() saw
  double last_print_s_ = -1e9;
  bool drew_ = false;
};

}  // namespace gradsync
