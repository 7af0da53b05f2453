#include "experiments/kept_results.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "worker/checkpoints.h"

namespace gradsync {
namespace fs = std::filesystem;

namespace {

// "metrics.csv (240 whole rows, steps 1 to 120)", or "" when there is no row to keep.
std::string metrics_kept(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";  // no header either
  long long rows = 0, first = -1, last = -1;
  while (std::getline(in, line)) {
    if (in.eof() && !line.empty()) break;  // a last line without its newline: not whole
    const long long step = std::strtoll(line.c_str(), nullptr, 10) + 1;  // steps count from 1
    if (first < 0) first = step;
    last = std::max(last, step);
    ++rows;
  }
  if (rows == 0) return "";
  return "metrics.csv (" + std::to_string(rows) + " whole rows, steps " + std::to_string(first) +
         " to " + std::to_string(last) + ")";
}

}  // namespace

std::string kept_results(const Config& config, const std::string& run_dir) {
  const fs::path dir(run_dir);
  std::vector<std::string> kept, missing;
  if (const std::string metrics = metrics_kept(dir / "metrics.csv"); !metrics.empty()) {
    kept.push_back(metrics);
  } else {
    missing.push_back("metrics.csv rows");
  }
  std::error_code ec;
  (fs::exists(dir / "trace.json", ec) ? kept : missing).push_back("trace.json");
  try {
    const std::string step = resolve_checkpoint(checkpoint_root(config, run_dir), config.name);
    kept.push_back("checkpoint " + step);
  } catch (const std::exception&) {
    // No complete checkpoint: nothing to say unless the run was asked for some.
    if (config.checkpoint.every > 0) missing.push_back("a complete checkpoint");
  }
  missing.push_back("summary.json");
  std::string text = "kept in " + run_dir + ": ";
  for (std::size_t i = 0; i < kept.size(); ++i) text += (i ? ", " : "") + kept[i];
  if (kept.empty()) text += "nothing";
  text += "; not written: ";
  for (std::size_t i = 0; i < missing.size(); ++i) text += (i ? ", " : "") + missing[i];
  return text;
}

}  // namespace gradsync
