// The output of `gradsync bench allreduce`: nccl-tests' table (all_reduce_perf's header, rows
// and footer, with a backend column first), or one JSON document. Rows are rendered one at a
// time, so that a caller can print each as it completes.
//
//   CollectiveTable table(info, /*json=*/false);
//   print(table.header());
//   for each finished row: print(table.row(row));   // JSON: "" (the row is kept for the end)
//   print(table.footer());                          // JSON: the whole document
//
// The backend column comes first, not after size: a row then reads as nccl-tests' row behind a
// label, so `grep '^ *gloo '` picks one backend and dropping the first field leaves
// all_reduce_perf's columns exactly, in their places. Column formats are nccl-tests' own
// (src/util.cu: %12li sizes, 7-wide times and 6-wide bandwidths that lose decimals before they
// overflow, #wrong as %6g). Not thread-safe; rank 0 alone uses it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench/collective_ops.h"
#include "bench/collective_sweep.h"

namespace gradsync {

// What the header (and the JSON document's parameters) say about the run.
struct TableInfo {
  std::string program = "gradsync bench allreduce";
  const CollectiveOp* op = nullptr;
  int ranks = 2;
  std::string ranks_as = "threads";  // threads | processes | mpirun
  std::size_t min_bytes = 0;
  std::size_t max_bytes = 0;
  int factor = 2;
  int warmup = 5;
  int iters = 0;         // 0: auto
  double seconds = 0.3;  // auto iterations' timed work per form
  double timeout_s = 60;
  std::string device = "cpu";
  // Each backend's name and one line on what runs underneath, in the rows' order.
  std::vector<std::pair<std::string, std::string>> backends;
};

class CollectiveTable {
 public:
  CollectiveTable(TableInfo info, bool json);

  std::string header() const;
  std::string row(const RowResult& row);  // records the row; its line, or "" for JSON
  std::string footer() const;             // the footer, or the JSON document (one, valid)

  std::uint64_t wrong() const;  // every row's #wrong, both forms

 private:
  TableInfo info_;
  bool json_;
  std::vector<RowResult> rows_;
};

// nccl-tests' getFloatStr: `value` in `width` characters with 2 decimals, fewer when it would
// not fit, then exponent form.
std::string nccl_float(double value, int width);

}  // namespace gradsync
