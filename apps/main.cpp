// gradsync: one executable, one subcommand per job. Thin: parses the command line and hands
// over to experiments/. This is the only place that catches exceptions: one line to stderr,
// exit code 1 (2 for command-line usage errors).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "common/error.h"
#include "experiments/bench/mlp_throughput.h"
#include "experiments/preset.h"
#include "experiments/run_experiment.h"

namespace {

constexpr const char* kPresetsDir = GRADSYNC_SOURCE_DIR "/experiments/presets";

int run_command(const std::string& preset_arg, const std::vector<std::string>& overrides,
                const std::string& output_dir, const std::vector<std::string>& only) {
  const std::string path = gradsync::find_preset(preset_arg, kPresetsDir);
  gradsync::Preset preset = gradsync::load_preset(path, overrides);
  if (!only.empty()) {
    std::erase_if(preset.runs, [&](const gradsync::Config& c) {
      return std::find(only.begin(), only.end(), c.name) == only.end();
    });
    if (preset.runs.empty()) {
      throw gradsync::ConfigError(path, "--only", "no run of the preset has that name");
    }
  }
  const gradsync::PresetOutcome outcome = gradsync::run_preset(preset, output_dir);
  std::vector<gradsync::RunSummary> summaries;
  for (const auto& run : outcome.runs) summaries.push_back(run.summary);
  std::cout << "\n" << gradsync::comparison_table(summaries) << "\nresults: " << outcome.dir
            << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gradsync: one model, several gradient-synchronisation strategies, measured "
               "side by side"};
  app.require_subcommand(1);

  std::string preset;
  std::vector<std::string> overrides;
  std::vector<std::string> only;
  std::string output_dir;
  bool list_keys = false;
  CLI::App* run = app.add_subcommand("run", "run a preset: every run in it, then a comparison");
  run->add_option("preset", preset, "preset name (experiments/presets/NAME.yaml) or YAML path");
  run->add_option("--set", overrides, "override a key for every run: --set train.lr=0.1");
  run->add_option("--only", only, "run only the named runs of the preset");
  run->add_option("--output", output_dir, "results root (default: output.dir of the preset)");
  run->add_flag("--keys", list_keys, "list every preset key with its default and meaning");

  gradsync::MlpBenchOptions bench_options;
  CLI::App* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  CLI::App* bench_mlp =
      bench->add_subcommand("mlp", "training throughput of the CPU MLP on one thread");
  bench_mlp->add_option("--hidden", bench_options.hidden, "hidden widths")->delimiter(',');
  bench_mlp->add_option("--batch", bench_options.batch, "batch size");
  bench_mlp->add_option("--seconds", bench_options.seconds, "timed seconds");
  bench_mlp->add_option("--warmup-steps", bench_options.warmup_steps, "untimed steps first");
  bench_mlp->add_flag("--json", bench_options.json, "print one JSON object");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (run->parsed()) {
      if (list_keys) {
        std::cout << gradsync::describe_keys();
        return 0;
      }
      if (preset.empty()) {
        std::cerr << "gradsync run: name a preset (e.g. `gradsync run quickstart`)\n";
        return 2;
      }
      return run_command(preset, overrides, output_dir, only);
    }
    if (bench_mlp->parsed()) {
      std::cout << gradsync::run_mlp_bench(bench_options) << "\n";
      return 0;
    }
  } catch (const std::exception& e) {
    std::cerr << "gradsync: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
