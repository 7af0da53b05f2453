// Where checkpoints are on disk (worker/checkpoints.h has what they hold and when they are
// written): <root>/step-<N>/part-<k>-of-<K>.ckpt, the root a run writes to, which step folder a
// --resume path names, and whether a step folder is complete (a crash may leave the newest one
// short of parts).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "common/config.h"
#include "common/error.h"

namespace gradsync {

// The part files of a step folder, by index, and how many there should be (0 when the names
// disagree on it, which no writer does).
struct PartListing {
  std::map<int, std::filesystem::path> parts;
  int expected = -1;
  bool consistent = true;
  bool complete() const {
    if (!consistent || expected <= 0 || static_cast<int>(parts.size()) != expected) return false;
    return parts.rbegin()->first == expected - 1;
  }
  // What resolving or loading an incomplete `folder` says.
  DataError incomplete(const std::string& folder) const {
    return DataError(folder, "incomplete checkpoint: " + std::to_string(parts.size()) + " of " +
                                 std::to_string(std::max(expected, 1)) +
                                 " part files (part-<k>-of-<K>.ckpt) present");
  }
};

// The part files in `folder` (a step folder), by index.
PartListing list_parts(const std::filesystem::path& folder);

// The newest complete step folder in `folder`; `any_step_folder` says whether it holds step
// folders at all (complete or not).
std::optional<std::filesystem::path> newest_complete(const std::filesystem::path& folder,
                                                     bool& any_step_folder);

// Where this run writes its checkpoints: <checkpoint.dir>/<run name>, else <run_dir>/checkpoints.
std::string checkpoint_root(const Config& config, const std::string& run_dir);

// Before a run starts (the launcher): throws ConfigError when a named checkpoint.dir already
// holds this run's step folders that it would overwrite: any, for a fresh run; any after the
// resumed step, for a resumed one. (The default root is in a new run folder: nothing to check.)
void claim_checkpoint_root(const Config& config);

// The step folder `path` names for run `run`, which may be: a step folder itself; a folder of
// step folders (the newest complete one: a crash may have left the newest incomplete); a run
// folder (its checkpoints/); or a preset's results folder (<run>/checkpoints/). Throws
// ConfigError (key checkpoint.resume) when there is none, DataError for an incomplete step
// folder named directly.
std::string resolve_checkpoint(const std::string& path, const std::string& run);

// The step a resolved checkpoint continues from (reads only the parts' headers).
std::uint64_t checkpoint_step(const std::string& step_folder);

}  // namespace gradsync
