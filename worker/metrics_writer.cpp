#include "worker/metrics_writer.h"

#include <cerrno>
#include <cinttypes>
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
[[noreturn]] void throw_io_error(const std::string& path, const char* what) {
  const int saved = errno;
  throw Error(path + ": " + what + ": " + std::strerror(saved));
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, Mode mode) : path_(path) {
  if (mode == Mode::kCreate) {
    std::FILE* header = std::fopen(path_.c_str(), "w");
    if (header == nullptr) throw_io_error(path_, "cannot create metrics file");
    // Writing the header now surfaces a full disk (or /dev/full) at construction, not mid-run.
    const bool written = std::fputs(kHeader, header) >= 0;
    if (std::fclose(header) != 0 || !written) throw_io_error(path_, "cannot write metrics header");
  }
  // Always append: several writers (rank processes) share the file, and a writer at its own
  // offset would overwrite the rows the others appended.
  file_ = std::fopen(path_.c_str(), "a");
  if (file_ == nullptr) throw_io_error(path_, "cannot open metrics file");
}

MetricsWriter::~MetricsWriter() {
  // Every row was already flushed, so a failing close loses nothing worth throwing for.
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsWriter::write(const MetricsRow& row) {
  const StepStats& s = row.stats;
  std::lock_guard<std::mutex> lock(mutex_);
  // One fprintf per row under the lock keeps rows from different threads whole. %.9g keeps
  // phase times (us..s) exact enough and time_s to 10 us even in hour-long runs.
  const int n = std::fprintf(
      file_,
      "%" PRId64 ",%d,%" PRId64 ",%.9g,%.6g,%.9g,%.9g,%.9g,%" PRIu64 ",%" PRIu64 ",%" PRIu32 "\n",
      row.step, row.rank, row.epoch, row.time_s, row.loss, s.compute_s, s.communicate_s, s.wait_s,
      s.bytes_sent, s.bytes_received, s.staleness);
  // Flush per row: a run that crashes later still leaves every finished step on disk.
  if (n < 0 || std::fflush(file_) != 0) throw_io_error(path_, "cannot write metrics row");
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
