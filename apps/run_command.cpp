#include "apps/run_command.h"

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "experiments/preset.h"
#include "experiments/run_experiment.h"
#include "worker/summary.h"

namespace gradsync {
namespace {

struct RunOptions {
  std::string preset;
  std::vector<std::string> overrides;
  std::vector<std::string> only;
  std::string output_dir;
  bool list_keys = false;
  std::string resume;
  int max_restarts = 0;
};

int run_and_compare(const RunOptions& o, const std::vector<std::string>& overrides) {
  const std::string path = find_preset(o.preset, presets_dir());
  const Preset preset = load_preset(path, overrides, o.only);
  const PresetOutcome outcome = run_preset(preset, o.output_dir, o.max_restarts);
  std::vector<RunSummary> summaries;
  for (const auto& run : outcome.runs) summaries.push_back(run.summary);
  std::cout << "\n" << comparison_table(summaries) << "\nresults: " << outcome.dir << "\n";
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& parent) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* run = parent.add_subcommand("run", "run a preset: every run in it, then a comparison");
  run->add_option("preset", options->preset,
                  "preset name (experiments/presets/NAME.yaml) or YAML path");
  run->add_option("--set", options->overrides, "override a key for every run: --set train.lr=0.1");
  run->add_option("--only", options->only, "run only the named runs of the preset");
  run->add_option("--output", options->output_dir,
                  "results root (default: output.dir of the preset)");
  run->add_flag("--keys", options->list_keys, "list every preset key with its default and meaning");
  run->add_option("--resume", options->resume,
                  "continue from a checkpoint: a step-N folder, a checkpoints folder (its newest "
                  "complete step), a run's or a preset's results folder");
  run->add_option("--max-restarts", options->max_restarts,
                  "restart a run of worker processes after a failure, at most this many times, "
                  "from its newest checkpoint (torchrun's --max_restarts)")
      ->check(CLI::Range(0, 1000));

  return {run, [options] {
            if (options->list_keys) {
              std::cout << describe_keys();
              return 0;
            }
            if (options->preset.empty()) {
              throw UsageError("name a preset, e.g. `gradsync run quickstart`");
            }
            std::vector<std::string> overrides = options->overrides;
            // --resume is checkpoint.resume for every run; each run finds its own checkpoint in it.
            if (!options->resume.empty())
              overrides.push_back("checkpoint.resume=" + options->resume);
            return run_and_compare(*options, overrides);
          }};
}

}  // namespace gradsync
