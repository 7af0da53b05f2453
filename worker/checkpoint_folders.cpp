#include "worker/checkpoint_folders.h"

#include <algorithm>
#include <map>
#include <regex>

#include "common/checkpoint_file.h"

namespace gradsync {
namespace fs = std::filesystem;
namespace {

const std::regex kPartName(R"(part-(\d+)-of-(\d+)\.ckpt)");
const std::regex kStepName(R"(step-(\d+))");

// A number from a file name; a name that no writer makes (too many digits) is named in the error.
std::uint64_t parse_number(const std::string& digits, const fs::path& file) {
  try {
    return std::stoull(digits);
  } catch (const std::exception&) {
    throw DataError(file.string(), "not a checkpoint name gradsync writes");
  }
}

bool is_step_folder(const fs::path& path) {
  return std::regex_match(path.filename().string(), kStepName);
}

// The step-<N> folders directly in `folder`, by step (none when it cannot be read).
std::map<std::uint64_t, fs::path> step_folders(const fs::path& folder) {
  std::map<std::uint64_t, fs::path> steps;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && std::regex_match(name, m, kStepName)) {
      steps[parse_number(m[1], entry.path())] = entry.path();
    }
  }
  return steps;
}

ConfigError no_checkpoint(const std::string& path, const std::string& why) {
  return ConfigError("checkpoint", "checkpoint.resume", path + ": " + why);
}

}  // namespace

PartListing list_parts(const fs::path& folder) {
  PartListing listing;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, m, kPartName)) continue;
    const int part =
        static_cast<int>(std::min<std::uint64_t>(parse_number(m[1], entry.path()), 1 << 20));
    const int of =
        static_cast<int>(std::min<std::uint64_t>(parse_number(m[2], entry.path()), 1 << 20));
    if (listing.expected != -1 && listing.expected != of) listing.consistent = false;
    listing.expected = of;
    listing.parts[part] = entry.path();
  }
  return listing;
}

std::optional<fs::path> newest_complete(const fs::path& folder, bool& any_step_folder) {
  const std::map<std::uint64_t, fs::path> steps = step_folders(folder);
  any_step_folder = !steps.empty();
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (list_parts(it->second).complete()) return it->second;
  }
  return std::nullopt;
}

std::string checkpoint_root(const Config& config, const std::string& run_dir) {
  // A named folder is shared by every run of the preset (and every sweep point): each run
  // writes below its own name, so two runs never write the same step folder.
  if (!config.checkpoint.dir.empty())
    return (fs::path(config.checkpoint.dir) / config.name).string();
  return (fs::path(run_dir) / "checkpoints").string();
}

void claim_checkpoint_root(const Config& config) {
  if (config.checkpoint.dir.empty() || config.checkpoint.every <= 0) return;  // a fresh run folder
  const fs::path root = checkpoint_root(config, "");
  const std::uint64_t resumed =
      config.checkpoint.resume.empty() ? 0 : checkpoint_step(config.checkpoint.resume);
  const std::map<std::uint64_t, fs::path> steps = step_folders(root);
  if (const auto later = steps.upper_bound(resumed); later != steps.end()) {
    throw ConfigError(config.name, "checkpoint.dir",
                      root.string() + " already holds " + later->second.filename().string() +
                          (config.checkpoint.resume.empty() ? ", from an earlier run"
                                                            : ", after the step being resumed") +
                          ": this run would overwrite it. Resume from the newest (--resume " +
                          root.string() + ") or choose another checkpoint.dir");
  }
}

std::string resolve_checkpoint(const std::string& path, const std::string& run) {
  // "step-00000050/" (as shell completion writes it) names the same folder as "step-00000050".
  fs::path p = fs::path(path).lexically_normal();
  if (p.has_relative_path() && p.filename().empty()) p = p.parent_path();
  std::error_code ec;
  if (!fs::is_directory(p, ec)) throw no_checkpoint(path, "no such folder");
  if (is_step_folder(p)) {
    const PartListing listing = list_parts(p);
    if (!listing.complete()) throw listing.incomplete(path);
    return p.string();
  }
  bool any_step_folder = false;
  if (const auto newest = newest_complete(p, any_step_folder)) return newest->string();
  if (any_step_folder) throw no_checkpoint(path, "no complete checkpoint in its step-* folders");
  if (fs::is_directory(p / "checkpoints", ec))
    return resolve_checkpoint((p / "checkpoints").string(), run);
  if (!run.empty() && fs::is_directory(p / run, ec))
    return resolve_checkpoint((p / run).string(), run);
  throw no_checkpoint(path, "no checkpoint here (no step-* folder, no checkpoints/, no " +
                                (run.empty() ? std::string("run folder") : run + "/") + ")");
}

std::uint64_t checkpoint_step(const std::string& step_folder) {
  const PartListing listing = list_parts(step_folder);
  GRADSYNC_CHECK(!listing.parts.empty(), "checkpoint_step of a folder without parts");
  return read_checkpoint_part(listing.parts.begin()->second.string(), true).step;
}

}  // namespace gradsync
