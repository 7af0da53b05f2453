// Presets: YAML files that describe one run or a comparison of several.
//
//   strategy: single          # top-level keys: the base configuration (common/config.h)
//   workers: 1
//   train: {epochs: 10, batch: 64, lr: 0.05}
//   runs:                     # optional: each entry overrides the base; one run per entry
//     - {name: single, strategy: single}
//     - {name: dp-4, strategy: dp, workers: 4}
//
// Overrides from the command line (`--set train.lr=0.1`) apply to every run, after the run's
// own entry. Every problem throws gradsync::ConfigError with one line naming the file, the line
// and the dotted key: an unknown key (with the known ones of that section listed), a value of
// the wrong type or out of range, a data directory or file that does not exist.
#pragma once

#include <string>
#include <vector>

#include "common/config.h"

namespace gradsync {

struct Preset {
  std::string name;          // file stem, e.g. "quickstart"
  std::string path;          // as given / as found
  std::vector<Config> runs;  // at least one
};

// `name_or_path` is a YAML file path, or the name of a shipped preset found as
// <presets_dir>/<name>.yaml. `presets_dir` is experiments/presets of the source tree.
std::string find_preset(const std::string& name_or_path, const std::string& presets_dir);

// `only` (when not empty): the runs --only names, the others dropped before their combinations
// of keys and their data directories are checked, so that an override meant for the chosen runs
// is not refused for the rest; a ConfigError naming --only, and the preset's runs, when no run
// has one of those names. Every run's keys and name (duplicates among all runs) are still checked.
Preset load_preset(const std::string& path, const std::vector<std::string>& overrides,
                   const std::vector<std::string>& only = {});

// A run's resolved config.yaml (run_preset writes one into each run folder), for `gradsync
// worker` and `gradsync server`: a ConfigError naming the file when it holds more than one run.
Config load_run_config(const std::string& path);

// One run of a preset resolved as `gradsync run` resolves it (find_preset, `--set` overrides),
// for `gradsync worker`: the preset's only run, or the one `only` names; a ConfigError naming
// --only, with the runs' names, when that leaves more than one.
struct PresetRun {
  Config config;
  std::string preset_name;  // the file stem, as run_preset names its folder
  std::string path;         // the file it came from
};
PresetRun resolve_one_run(const std::string& name_or_path, const std::string& presets_dir,
                          const std::vector<std::string>& overrides,
                          const std::vector<std::string>& only);

// Whether a loaded preset must be able to run here: kToRun checks that data.dir exists (and
// fills in the Fashion-MNIST default); kToRead does not, for reading a results folder's
// config.yaml on another machine (`gradsync model --calibrate`).
enum class PresetUse { kToRun, kToRead };

// Parses YAML text as if read from `source_name` (for tests and for config.yaml round trips).
Preset load_preset_text(const std::string& yaml_text, const std::string& source_name,
                        const std::vector<std::string>& overrides,
                        PresetUse use = PresetUse::kToRun,
                        const std::vector<std::string>& only = {});

// The fully resolved configuration as YAML (what config.yaml in a results folder holds). Loading
// it back with load_preset_text gives the same Config.
std::string to_yaml(const Config& config);

// One line per key: "train.lr  number  0.05  learning rate" (for `gradsync run --keys`).
std::string describe_keys();

}  // namespace gradsync
