#include "bench/collective_table.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "bench/sprint.h"

namespace gradsync {
namespace {

double gb_per_s(std::size_t bytes, double seconds) {
  return static_cast<double>(bytes) / seconds / 1e9;  // 0 s: inf, printed as nccl-tests would
}

struct Bandwidth {
  double time_us, algbw, busbw;
};

Bandwidth bandwidth(const TableInfo& info, const RowResult& row, const Measurement& m) {
  const double algbw = gb_per_s(row.bytes, m.seconds);
  return {m.seconds * 1e6, algbw, algbw * info.op->bus_factor(info.ranks)};
}

const char* ranks_as_text(const std::string& ranks_as) {
  if (ranks_as == "processes") return "processes started by gradsync";
  if (ranks_as == "mpirun") return "processes started by mpirun";
  return "threads of one process";
}

// JSON has no NaN or infinity: such a number becomes null.
nlohmann::json number(double value) {
  return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

nlohmann::json form_json(const TableInfo& info, const RowResult& row, const Measurement& m) {
  const Bandwidth bw = bandwidth(info, row, m);
  // nccl-tests' keys (time in us, bandwidths in GB/s, nwrong), and the iterations timed.
  return {{"time", number(bw.time_us)},
          {"alg_bw", number(bw.algbw)},
          {"bus_bw", number(bw.busbw)},
          {"nwrong", m.wrong},
          {"iters", m.iters}};
}

// Each backend's mean busbw over its rows' both forms, as nccl-tests averages its table.
std::vector<std::pair<std::string, double>> average_busbw(const TableInfo& info,
                                                          const std::vector<RowResult>& rows) {
  std::vector<std::pair<std::string, double>> averages;
  for (const auto& [backend, description] : info.backends) {
    double sum = 0;
    int count = 0;
    for (const RowResult& row : rows) {
      if (row.backend != backend) continue;
      sum +=
          bandwidth(info, row, row.out_of_place).busbw + bandwidth(info, row, row.in_place).busbw;
      count += 2;
    }
    averages.emplace_back(backend, count > 0 ? sum / count : 0.0);
  }
  return averages;
}

}  // namespace

std::string nccl_float(double value, int width) {
  for (const char* format : {"%*.2f", "%*.1f", "%*.0f"}) {
    const std::string text = sprint(format, width, value);
    if (static_cast<int>(text.size()) <= width) return text;
  }
  return sprint(width >= 7 ? "%*.1e" : "%*.0e", width, value);
}

CollectiveTable::CollectiveTable(TableInfo info, bool json) : info_(std::move(info)), json_(json) {}

std::string CollectiveTable::header() const {
  if (json_) return "";
  const CollectiveOp& op = *info_.op;
  std::string out = "# " + info_.program + "\n";
  out += "# Collective test starting: " + info_.program + " --op " + op.name + "\n";
  // nccl-tests' parameter line, in gradsync's terms: ranks instead of threads x GPUs.
  out += sprint(
      "# nRanks %d (%s) minBytes %zu maxBytes %zu step: %d(factor) warmup iters: %d iters: %s "
      "validation: 1\n",
      info_.ranks, ranks_as_text(info_.ranks_as), info_.min_bytes, info_.max_bytes, info_.factor,
      info_.warmup,
      info_.iters > 0 ? std::to_string(info_.iters).c_str()
                      : sprint("0 (auto, ~%g s per form)", info_.seconds).c_str());
  out += sprint(
      "# %s; type float; time: max over ranks of the mean per-iteration time; "
      "busbw = algbw * %.4g\n",
      op.name.c_str(), op.bus_factor(info_.ranks));
  out += "# " + std::string(op.composed) + "\n";
  out += "#\n# Using backends\n";
  for (const auto& [backend, description] : info_.backends) {
    out += sprint("#  %-10s %s\n", backend.c_str(), description.c_str());
  }
  out += "#\n";
  // src/util.cu's writeResultHeader, with the backend column in front of size.
  out += sprint(
      "# %8s  %12s  %12s  %8s  %6s  %6s           out-of-place                       "
      "in-place          \n",
      "", "", "", "", "", "");
  out += sprint("# %8s  %12s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n",
                "backend", "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
                "#wrong", "time", "algbw", "busbw", "#wrong");
  out += sprint("# %8s  %12s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "",
                "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                "(GB/s)", "");
  return out;
}

std::string CollectiveTable::row(const RowResult& row) {
  rows_.push_back(row);
  if (json_) return "";
  const CollectiveOp& op = *info_.op;
  std::string line = sprint("%10s  %12zu  %12zu  %8s  %6s  %6i", row.backend.c_str(), row.bytes,
                            row.count, "float", op.redop, op.root);
  for (const Measurement* m : {&row.out_of_place, &row.in_place}) {
    const Bandwidth bw = bandwidth(info_, row, *m);
    line += sprint("  %7s  %6s  %6s  %6g", nccl_float(bw.time_us, 7).c_str(),
                   nccl_float(bw.algbw, 6).c_str(), nccl_float(bw.busbw, 6).c_str(),
                   static_cast<double>(m->wrong));
  }
  return line + "\n";
}

std::uint64_t CollectiveTable::wrong() const {
  std::uint64_t wrong = 0;
  for (const RowResult& row : rows_) wrong += row.out_of_place.wrong + row.in_place.wrong;
  return wrong;
}

std::string CollectiveTable::footer() const {
  const auto averages = average_busbw(info_, rows_);
  if (!json_) {
    // src/util.cu's writeResultFooter; with several backends, one average each, its name where
    // nccl-tests puts OK/FAILED against NCCL_TESTS_MIN_BW (which this has not).
    std::string out = sprint("# %-20s : %llu %s\n", "Out of bounds values",
                             static_cast<unsigned long long>(wrong()), wrong() ? "FAILED" : "OK");
    for (const auto& [backend, busbw] : averages) {
      out += sprint("# %-20s : %g %s\n", "Avg bus bandwidth", busbw,
                    averages.size() > 1 ? backend.c_str() : "");
    }
    return out + "#\n# Collective test concluded: " + info_.program + "\n#\n";
  }
  const CollectiveOp& op = *info_.op;
  nlohmann::json doc;
  doc["program"] = info_.program;
  doc["parameters"] = {{"op", op.name},
                       {"type", "float"},
                       {"redop", op.redop},
                       {"root", op.root},
                       {"ranks", info_.ranks},
                       {"ranks_as", info_.ranks_as},
                       {"device", info_.device},
                       {"min_bytes", info_.min_bytes},
                       {"max_bytes", info_.max_bytes},
                       {"step_factor", info_.factor},
                       {"warmup_iters", info_.warmup},
                       {"iters", info_.iters},
                       {"auto_seconds", info_.seconds},
                       {"timeout_s", info_.timeout_s},
                       {"bus_factor", number(op.bus_factor(info_.ranks))},
                       {"composed", op.composed}};
  doc["backends"] = nlohmann::json::array();
  for (const auto& [backend, description] : info_.backends) {
    doc["backends"].push_back({{"name", backend}, {"description", description}});
  }
  doc["results"] = nlohmann::json::array();
  for (const RowResult& row : rows_) {
    doc["results"].push_back({{"backend", row.backend},
                              {"size", row.bytes},
                              {"count", row.count},
                              {"type", "float"},
                              {"redop", op.redop},
                              {"root", op.root},
                              {"out_of_place", form_json(info_, row, row.out_of_place)},
                              {"in_place", form_json(info_, row, row.in_place)}});
  }
  doc["out_of_bounds"] = {{"count", wrong()}, {"okay", wrong() == 0}};
  doc["average_bus_bandwidth"] = nlohmann::json::object();
  for (const auto& [backend, busbw] : averages)
    doc["average_bus_bandwidth"][backend] = number(busbw);
  return doc.dump(2) + "\n";
}

}  // namespace gradsync
