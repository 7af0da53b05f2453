#include "common/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <utility>

#include "common/error.h"

namespace gradsync {
namespace {

// Terminal lines are padded to this width so a shorter line hides the tail of a longer one.
// 79 rather than 80 so an 80-column terminal never wraps onto a new line.
constexpr std::size_t kTerminalPadWidth = 79;

// 3 significant digits with a k/M/G suffix: "812", "61.2k", "1.23M".
std::string format_rate(double rate) {
  if (!std::isfinite(rate) || rate < 0) return "-";
  static constexpr const char* kSuffixes[] = {"", "k", "M", "G", "T"};
  std::size_t unit = 0;
  // Compare against 999.5 (not 1000) so that rounding never prints "1000k" or "1e+03".
  while (rate >= 999.5 && unit + 1 < std::size(kSuffixes)) {
    rate /= 1000.0;
    ++unit;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.3g%s", rate, kSuffixes[unit]);
  return buffer;
}

// "m:ss" below an hour, "h:mm:ss" from then on.
std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-:--";
  const long long total = std::llround(seconds);
  const long long h = total / 3600;
  const long long m = (total / 60) % 60;
  const long long s = total % 60;
  char buffer[48];
  if (h > 0) {
    std::snprintf(buffer, sizeof(buffer), "%lld:%02lld:%02lld", h, m, s);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%lld:%02lld", m, s);
  }
  return buffer;
}

ProgressMode resolve(ProgressMode mode, std::FILE* out) {
  if (out == nullptr) return ProgressMode::kOff;
  if (mode != ProgressMode::kAuto) return mode;
  return isatty(fileno(out)) ? ProgressMode::kTerminal : ProgressMode::kPlain;
}

}  // namespace

ProgressMode parse_progress_mode(const std::string& name) {
  if (name == "auto") return ProgressMode::kAuto;
  if (name == "terminal") return ProgressMode::kTerminal;
  if (name == "plain") return ProgressMode::kPlain;
  if (name == "off") return ProgressMode::kOff;
  throw Error("unknown progress mode '" + name + "' (expected one of: auto, terminal, plain, off)");
}

ProgressMode relayed_if_asked(ProgressMode configured) {
  const char* relay = std::getenv(kProgressRelayEnv);
  const bool asked = relay != nullptr && std::string(relay) == "1";
  return asked && (configured == ProgressMode::kAuto || configured == ProgressMode::kTerminal)
             ? ProgressMode::kRelayed
             : configured;
}

ProgressReporter::ProgressReporter(std::string label, std::int64_t total_steps, std::int64_t epochs,
                                   std::int64_t samples_per_step, ProgressMode mode, std::FILE* out,
                                   ProgressTiming timing)
    : label_(std::move(label)),
      total_steps_(total_steps),
      epochs_(epochs),
      samples_per_step_(samples_per_step),
      mode_(resolve(mode, out)),
      out_(out),
      timing_(timing) {}

std::string ProgressReporter::format_line(std::int64_t step, std::int64_t epoch, double loss,
                                          double elapsed_s) const {
  const std::int64_t done = step + 1;
  // Rate and ETA from the steps this process ran: a resumed run's earlier steps took none of
  // `elapsed_s`.
  const std::int64_t done_here = done - first_step_.value_or(0);
  const double rate =
      elapsed_s > 0 ? static_cast<double>(done_here * samples_per_step_) / elapsed_s : -1.0;
  // ETA from the mean step time so far: steadier than the latest step's time.
  const std::int64_t remaining = total_steps_ > done ? total_steps_ - done : 0;
  const double eta_s =
      remaining == 0
          ? 0.0
          : (elapsed_s > 0 && done_here > 0
                 ? elapsed_s / static_cast<double>(done_here) * static_cast<double>(remaining)
                 : -1.0);
  char buffer[256];
  std::snprintf(buffer, sizeof(buffer),
                "[%s] step %lld/%lld  epoch %lld/%lld  loss %.4f  %s samples/s  ETA %s",
                label_.c_str(), static_cast<long long>(done), static_cast<long long>(total_steps_),
                static_cast<long long>(epoch + 1), static_cast<long long>(epochs_), loss,
                format_rate(rate).c_str(), format_duration(eta_s).c_str());
  return buffer;
}

void ProgressReporter::update(std::int64_t step, std::int64_t epoch, double loss) {
  if (!first_step_) first_step_ = step;  // the clock started just before this step
  if (mode_ == ProgressMode::kOff) return;
  const double now = clock_.seconds();
  if (now < timing_.quiet_for_s) return;  // short runs and tests stay silent
  const double since_last = now - last_print_s_;

  if (mode_ == ProgressMode::kTerminal) {
    // The final step is always drawn so the line left on screen shows the run completed.
    const bool final_step = step + 1 >= total_steps_;
    if (since_last < timing_.redraw_interval_s && !(final_step && drew_)) return;
    std::string line = format_line(step, epoch, loss, now);
    if (line.size() < kTerminalPadWidth) line.resize(kTerminalPadWidth, ' ');
    std::fprintf(out_, "\r%s", line.c_str());
  } else if (mode_ == ProgressMode::kRelayed) {
    const bool final_step = step + 1 >= total_steps_;
    if (since_last < timing_.relay_interval_s && !(final_step && drew_)) return;
    std::fprintf(out_, "%c%s\n", kProgressMark, format_line(step, epoch, loss, now).c_str());
  } else {
    if (since_last < timing_.plain_interval_s) return;
    std::fprintf(out_, "%s\n", format_line(step, epoch, loss, now).c_str());
  }
  // Progress is cosmetic: a failed write (closed pipe) is not worth stopping a run for.
  std::fflush(out_);
  last_print_s_ = now;
  drew_ = true;
}

void ProgressReporter::finish() {
  if (mode_ == ProgressMode::kTerminal && drew_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
  // Reset so a second finish() does not print a blank line.
  drew_ = false;
}

}  // namespace gradsync
