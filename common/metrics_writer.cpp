#include "common/metrics_writer.h"

#include <cerrno>
#include <cinttypes>
#include <cstring>

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
  file_ = std::fopen(path_.c_str(), mode == Mode::kCreate ? "w" : "a");
  if (file_ == nullptr) throw_io_error(path_, "cannot create metrics file");
  if (mode == Mode::kAppend) return;
  // Flushing the header now surfaces a full disk (or /dev/full) at construction, not mid-run.
  if (std::fputs(kHeader, file_) < 0 || std::fflush(file_) != 0) {
    const int saved = errno;
    std::fclose(file_);  // the destructor does not run when the constructor throws
    file_ = nullptr;
    errno = saved;
    throw_io_error(path_, "cannot write metrics header");
  }
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
      file_, "%" PRId64 ",%d,%" PRId64 ",%.9g,%.6g,%.9g,%.9g,%.9g,%" PRIu64 ",%" PRIu64 ",%" PRIu32
      "\n",
      row.step, row.rank, row.epoch, row.time_s, row.loss, s.compute_s, s.communicate_s, s.wait_s,
      s.bytes_sent, s.bytes_received, s.staleness);
  // Flush per row: a run that crashes later still leaves every finished step on disk.
  if (n < 0 || std::fflush(file_) != 0) throw_io_error(path_, "cannot write metrics row");
}

}  // namespace gradsync
