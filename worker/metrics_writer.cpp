#include "worker/metrics_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/atomic_file.h"
#include "common/error.h"

namespace gradsync {
namespace {

constexpr char kHeader[] =
    "step,rank,epoch,time_s,loss,compute_s,communicate_s,wait_s,bytes_sent,bytes_received,"
    "staleness\n";

// Captures errno before anything else can overwrite it.
[[noreturn]] void throw_io_error(const std::string& path, const char* what, int error = errno) {
  throw Error(path + ": " + what + ": " + std::strerror(error));
}

// Appends `text` to `fd` (O_APPEND) in one write(2), whole or not at all: a short write (a full
// disk mid-row) is cut off again, so that no reader ever sees half a row.
void append_whole(int fd, const std::string& text, const std::string& path, const char* what) {
  const ssize_t n = ::write(fd, text.data(), text.size());
  if (n == static_cast<ssize_t>(text.size())) return;
  const int error = n < 0 ? errno : ENOSPC;  // a short write is the disk running out
  if (n > 0) {
    // O_APPEND put our bytes at the end: the offset after them, less what was written.
    const off_t end = ::lseek(fd, 0, SEEK_CUR);
    if (end >= n) (void)::ftruncate(fd, end - n);
  }
  throw_io_error(path, what, error);
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, Mode mode) : path_(path) {
  // Always append: several writers (rank processes) share the file, and a writer at its own
  // offset would overwrite the rows the others appended.
  // kAppend creates a missing file too: under an external launcher a rank may get here before
  // the one that writes the header.
  const int flags =
      O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | (mode == Mode::kCreate ? O_TRUNC : 0);
  fd_ = ::open(path_.c_str(), flags, 0644);
  if (fd_ < 0) {
    throw_io_error(path_, mode == Mode::kCreate ? "cannot create metrics file"
                                                : "cannot open metrics file");
  }
  if (mode == Mode::kCreate) {
    // Writing the header now surfaces a full disk (or /dev/full) at construction, not mid-run.
    try {
      append_whole(fd_, kHeader, path_, "cannot write metrics header");
    } catch (...) {
      ::close(fd_);
      throw;
    }
  }
}

MetricsWriter::~MetricsWriter() {
  // Every row is in the file already (no user-space buffer), so closing loses nothing.
  if (fd_ >= 0) ::close(fd_);
}

void MetricsWriter::write(const MetricsRow& row) {
  const StepStats& s = row.stats;
  // %.9g keeps phase times (us..s) exact enough and time_s to 10 us even in hour-long runs.
  char text[512];
  const int n = std::snprintf(
      text, sizeof text,
      "%" PRId64 ",%d,%" PRId64 ",%.9g,%.6g,%.9g,%.9g,%.9g,%" PRIu64 ",%" PRIu64 ",%" PRIu32 "\n",
      row.step, row.rank, row.epoch, row.time_s, row.loss, s.compute_s, s.communicate_s, s.wait_s,
      s.bytes_sent, s.bytes_received, s.staleness);
  GRADSYNC_CHECK(n > 0 && n < int(sizeof text), "a metrics row fits its buffer");
  // One write per row under the lock keeps rows from different threads whole, and it goes to
  // the kernel at once: a run that crashes later still leaves every finished step on disk.
  std::lock_guard<std::mutex> lock(mutex_);
  append_whole(fd_, std::string(text, std::size_t(n)), path_, "cannot write metrics row");
}

void keep_rows_before(const std::string& path, std::int64_t step) {
  std::ifstream in(path);
  if (!in) throw_io_error(path, "cannot read metrics file");
  std::string kept;
  std::string line;
  bool header = true;
  while (std::getline(in, line)) {
    // A line without its newline is a row cut short by the failure.
    if (in.eof()) break;
    if (header) {
      kept += line + "\n";
      header = false;
      continue;
    }
    const std::int64_t row_step = std::strtoll(line.c_str(), nullptr, 10);
    if (row_step < step) kept += line + "\n";
  }
  if (header) kept = kHeader;  // nothing was written yet, not even the header
  write_file_atomically(path, kept);
}

}  // namespace gradsync
