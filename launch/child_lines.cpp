#include "launch/child_lines.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "common/progress.h"

namespace gradsync {
namespace {

// The progress line relayed children send (ProgressMode::kRelayed, when the launcher's stderr
// is a terminal): kept at the bottom of the terminal and redrawn in place, every other line
// printed above it.
std::string& shown_progress() {
  static std::string line;  // "[rank 0] [allreduce-4] step ..."; empty: none shown
  return line;
}

void draw_progress(const std::string& text) {
  std::string& progress = shown_progress();
  progress = text;
  std::fprintf(stderr, "\r\033[K%s", progress.c_str());
  std::fflush(stderr);
}

}  // namespace

ChildLines::ChildLines(const std::string& name, const std::vector<std::string>& blame_markers)
    : name_(name), markers_(&blame_markers), marked_(blame_markers.size()) {}

bool ChildLines::relay_from(int fd) {
  char buffer[4096];
  const ssize_t n = read(fd, buffer, sizeof buffer);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    if (!partial_.empty()) {
      relay_line(partial_);
      partial_.clear();
    }
    return false;
  }
  if (n < 0) return true;
  partial_.append(buffer, static_cast<std::size_t>(n));
  std::size_t start = 0;
  for (std::size_t nl; (nl = partial_.find_first_of("\n\r", start)) != std::string::npos;
       start = nl + 1) {
    if (nl > start) relay_line(std::string_view(partial_.data() + start, nl - start));
  }
  partial_.erase(0, start);
  return true;
}

const std::string& ChildLines::quoted() const {
  for (const std::string& line : marked_) {
    if (!line.empty()) return line;
  }
  return last_line_;
}

// A progress line drawn in place; any other relayed with the child's name and kept.
void ChildLines::relay_line(std::string_view line) {
  if (!line.empty() && line.front() == kProgressMark) {
    draw_progress("[" + name_ + "] " + std::string(line.substr(1)));
    return;
  }
  print_line("[" + name_ + "] " + std::string(line));
  note_line(line);
}

void ChildLines::note_line(std::string_view line) {
  if (line.find_first_not_of(" \t-=*_#") == std::string_view::npos) return;
  last_line_.assign(line);
  for (std::size_t i = 0; i < markers_->size(); ++i) {
    if (marked_[i].empty() && line.find((*markers_)[i]) != std::string_view::npos) {
      marked_[i].assign(line);
    }
  }
}

void print_line(const std::string& line) {
  const std::string& progress = shown_progress();
  if (!progress.empty()) std::fputs("\r\033[K", stderr);
  std::fprintf(stderr, "%s\n", line.c_str());
  if (!progress.empty()) std::fputs(progress.c_str(), stderr);
}

ProgressLineEnd::~ProgressLineEnd() {
  if (shown_progress().empty()) return;
  std::fputc('\n', stderr);
  shown_progress().clear();
}

}  // namespace gradsync
