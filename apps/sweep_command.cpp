#include "apps/sweep_command.h"

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "experiments/preset.h"
#include "experiments/sweep.h"

namespace gradsync {

Command add_sweep_command(CLI::App& parent) {
  struct Options {
    std::string preset;
    std::vector<std::string> overrides;
    std::string output;
  };
  auto options = std::make_shared<Options>();
  CLI::App* sweep = parent.add_subcommand(
      "sweep", "run a preset's runs at every N of sweep.workers; write sweep.csv and sweep.md");
  sweep->add_option("preset", options->preset, "preset name or YAML path")->required();
  sweep->add_option("--set", options->overrides, "override a key: --set sweep.workers=[1,2,4]");
  sweep->add_option("--output", options->output,
                    "results root (default: output.dir of the preset)");

  return {sweep, [options] {
            const Preset preset =
                load_preset(find_preset(options->preset, presets_dir()), options->overrides);
            const SweepOutcome outcome = run_sweep(preset, options->output);
            std::cout << "\n"
                      << sweep_markdown(outcome.rows) << "\nresults: " << outcome.dir
                      << "  (sweep.csv, sweep.md; plot with plots/plot_results.py)\n";
            return 0;
          }};
}

}  // namespace gradsync
