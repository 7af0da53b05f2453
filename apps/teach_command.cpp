#include "apps/teach_command.h"

#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "experiments/preset.h"
#include "experiments/run_experiment.h"
#include "teach/dp_vs_ddp.h"
#include "teach/hierarchical.h"
#include "teach/ring_schedule.h"
#include "teach/zero_lesson.h"

namespace gradsync {
namespace {

// One lesson is one sub-subcommand: a function like add_ring_lesson plus one line in
// add_teach_command.
Command add_ring_lesson(CLI::App& teach) {
  struct Options {
    int workers = 4;
    int elements = 8;
    bool numeric = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* ring = teach.add_subcommand(
      "ring", "ring all-reduce step by step: who sends which segment, who holds which sum");
  ring->add_option("-n,--workers", options->workers, "ranks in the ring")
      ->check(CLI::Range(1, teach::kMaxRingWorkers))
      ->capture_default_str();
  ring->add_option("-e,--elements", options->elements,
                   "elements in the buffer (0 and fewer than --workers work too)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  ring->add_flag("--numeric", options->numeric,
                 "also print every rank's numbers after each step, not only the final ones");
  return {ring, [options] {
            const teach::RingSchedule schedule =
                teach::ring_schedule(options->workers, std::size_t(options->elements));
            std::cout << teach::render_ring_schedule(schedule, {options->numeric});
            return 0;
          }};
}

// A lesson that runs a preset and prints a table of what its runs measured beside the cost
// model's figures: `table` turns the preset's configurations and outcomes into that text.
using LessonTable =
    std::function<std::string(const std::vector<Config>&, const std::vector<RunOutcome>&)>;

Command add_preset_lesson(CLI::App& teach, const std::string& name, const std::string& preset,
                          const std::string& description, const std::string& set_example,
                          LessonTable table) {
  struct Options {
    std::string preset;
    std::vector<std::string> overrides;
    std::string output;
  };
  auto options = std::make_shared<Options>();
  options->preset = preset;
  CLI::App* lesson = teach.add_subcommand(name, description);
  lesson->add_option("--preset", options->preset, "the preset to run")->capture_default_str();
  lesson->add_option("--set", options->overrides, "override a key, e.g. " + set_example);
  lesson->add_option("--output", options->output, "results root (default: output.dir)");
  return {lesson, [options, table = std::move(table)] {
            const Preset loaded =
                load_preset(find_preset(options->preset, presets_dir()), options->overrides);
            const PresetOutcome outcome = run_preset(loaded, options->output);
            std::cout << "\n"
                      << table(loaded.runs, outcome.runs) << "\nresults: " << outcome.dir << "\n";
            return 0;
          }};
}

}  // namespace

Command add_teach_command(CLI::App& parent) {
  CLI::App* teach =
      parent.add_subcommand("teach", "step-by-step demos of how the strategies move data");
  teach->require_subcommand(1);
  std::vector<Command> lessons = {
      add_ring_lesson(*teach),
      add_preset_lesson(*teach, "dp-vs-ddp", "dp-vs-ddp",
                        "run DataParallel-style dp and DDP-style allreduce on the same model and "
                        "links, and print measured bytes and times beside the model's prediction",
                        "network.link_gbps=2",
                        [](const auto& configs, const auto& runs) {
                          return teach::render_dp_vs_ddp(teach::dp_vs_ddp_rows(configs, runs));
                        }),
      add_preset_lesson(*teach, "hierarchical", "hierarchical",
                        "run a flat ring and the hierarchical all-reduce on the same simulated "
                        "hosts (root: network namespaces) and print the bytes between hosts "
                        "beside the model's",
                        "network.hosts=4",
                        [](const auto& configs, const auto& runs) {
                          return teach::render_hierarchical(
                              teach::hierarchical_rows(configs, runs));
                        }),
      add_preset_lesson(*teach, "zero", "zero",
                        "run allreduce and ZeRO's stages on one model and print the model state "
                        "each rank held and the bytes it sent, measured, beside the model's",
                        "train.steps=10", [](const auto& configs, const auto& runs) {
                          return teach::render_zero(teach::zero_rows(configs, runs));
                        })};
  return {teach, [lessons = std::move(lessons)] { return run_parsed(lessons); }};
}

}  // namespace gradsync
