// What one child of the launcher prints, as the launcher relays it: each whole line prefixed
// with the child's name, the progress line (common/progress.h's kProgressMark) drawn in place
// at the bottom of a terminal, and the lines a failure may quote kept.
//
//   ChildLines lines("rank 1", spec.blame_markers);
//   while (lines.relay_from(fd)) poll(...);   // false at end of stream: the last line relayed
//   throw Error("rank 1 exited with code 1 (last said: " + lines.quoted() + ")");
//
// One thread relays every child: the progress line is launcher-wide, as stderr is.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace gradsync {

class ChildLines {
 public:
  // `blame_markers` must outlive this (the ProcessSpec's own).
  ChildLines(const std::string& name, const std::vector<std::string>& blame_markers);
  ChildLines(const std::string& name, std::vector<std::string>&& blame_markers) = delete;

  // Reads what `fd` holds now (non-blocking) and relays its whole lines. Returns false at end of
  // stream or on a read error, after relaying an unfinished last line; the caller closes `fd`.
  bool relay_from(int fd);

  // The line a failure quotes: the first holding a blame marker, by the markers' order, else
  // the last line that said something (mpirun frames its messages in rules of dashes).
  const std::string& quoted() const;

 private:
  void relay_line(std::string_view line);
  void note_line(std::string_view line);

  std::string name_;
  const std::vector<std::string>* markers_;
  std::string partial_;              // an unfinished line
  std::string last_line_;            // the last line that said something
  std::vector<std::string> marked_;  // per blame marker, the first line holding it
};

// A whole line (without its newline) on stderr, above the progress line if one is shown.
void print_line(const std::string& line);

// Leaves the progress line on screen as it last was, and later output below it.
struct ProgressLineEnd {
  ~ProgressLineEnd();
};

}  // namespace gradsync
