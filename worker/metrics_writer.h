// metrics.csv: one row per rank per step, written as the run goes and flushed per row so that
// a run that dies keeps every row written before the failure.
//
// Columns (header line first):
//   step,rank,epoch,time_s,loss,compute_s,communicate_s,wait_s,bytes_sent,bytes_received,staleness
// time_s is seconds since the run's start at the end of the step.
//
// Thread-safe: dp replicas on several threads share one writer. Process-safe in kAppend mode:
// the file is opened O_APPEND and every row leaves in one write(2), so rank processes can
// append to the one metrics.csv the launcher created without tearing each other's rows. Throws
// gradsync::Error naming the path when the file cannot be created or a write fails (disk full).
// Rows are whole or absent: a write the disk cut short is truncated away before the throw, so
// the file ends with the last complete row.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "common/step_stats.h"

namespace gradsync {

struct MetricsRow {
  std::int64_t step = 0;
  int rank = 0;
  std::int64_t epoch = 0;
  double time_s = 0;
  double loss = 0;
  StepStats stats;
};

class MetricsWriter {
 public:
  enum class Mode { kCreate, kAppend };
  // kCreate: creates/truncates and writes the header; kAppend: adds rows to an existing file.
  explicit MetricsWriter(const std::string& path, Mode mode = Mode::kCreate);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void write(const MetricsRow& row);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;  // O_APPEND
  std::mutex mutex_;
};

// A run restarted after a failure goes on from a checkpoint of step `step`: keeps the header and
// the rows of earlier steps, dropping those of `step` and later (the restart writes them again)
// and a last row cut short, so that every step keeps one row per rank. Rewritten atomically
// (common/atomic_file.h); call it while no writer has the file open. Throws Error naming the
// path when it cannot be read or written.
void keep_rows_before(const std::string& path, std::int64_t step);

}  // namespace gradsync
