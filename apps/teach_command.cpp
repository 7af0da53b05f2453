#include "apps/teach_command.h"

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

Command add_dp_vs_ddp_lesson(CLI::App& teach) {
  struct Options {
    std::string preset = "dp-vs-ddp";
    std::vector<std::string> overrides;
    std::string output;
  };
  auto options = std::make_shared<Options>();
  CLI::App* lesson = teach.add_subcommand(
      "dp-vs-ddp",
      "run DataParallel-style dp and DDP-style allreduce on the same model and "
      "links, and print measured bytes and times beside the model's prediction");
  lesson->add_option("--preset", options->preset, "the preset to run")->capture_default_str();
  lesson->add_option("--set", options->overrides, "override a key, e.g. network.link_gbps=2");
  lesson->add_option("--output", options->output, "results root (default: output.dir)");
  return {lesson, [options] {
            const Preset preset =
                load_preset(find_preset(options->preset, presets_dir()), options->overrides);
            const PresetOutcome outcome = run_preset(preset, options->output);
            std::cout << "\n"
                      << teach::render_dp_vs_ddp(teach::dp_vs_ddp_rows(preset.runs, outcome.runs))
                      << "\nresults: " << outcome.dir << "\n";
            return 0;
          }};
}

Command add_hierarchical_lesson(CLI::App& teach) {
  struct Options {
    std::string preset = "hierarchical";
    std::vector<std::string> overrides;
    std::string output;
  };
  auto options = std::make_shared<Options>();
  CLI::App* lesson = teach.add_subcommand(
      "hierarchical",
      "run a flat ring and the hierarchical all-reduce on the same simulated hosts (root: network "
      "namespaces) and print the bytes between hosts beside the model's");
  lesson->add_option("--preset", options->preset, "the preset to run")->capture_default_str();
  lesson->add_option("--set", options->overrides, "override a key, e.g. network.hosts=4");
  lesson->add_option("--output", options->output, "results root (default: output.dir)");
  return {
      lesson, [options] {
        const Preset preset =
            load_preset(find_preset(options->preset, presets_dir()), options->overrides);
        const PresetOutcome outcome = run_preset(preset, options->output);
        std::cout << "\n"
                  << teach::render_hierarchical(teach::hierarchical_rows(preset.runs, outcome.runs))
                  << "\nresults: " << outcome.dir << "\n";
        return 0;
      }};
}

Command add_zero_lesson(CLI::App& teach) {
  struct Options {
    std::string preset = "zero";
    std::vector<std::string> overrides;
    std::string output;
  };
  auto options = std::make_shared<Options>();
  CLI::App* lesson = teach.add_subcommand(
      "zero",
      "run allreduce and ZeRO's stages on one model and print the model state each rank held "
      "and the bytes it sent, measured, beside the model's");
  lesson->add_option("--preset", options->preset, "the preset to run")->capture_default_str();
  lesson->add_option("--set", options->overrides, "override a key, e.g. train.steps=10");
  lesson->add_option("--output", options->output, "results root (default: output.dir)");
  return {lesson, [options] {
            const Preset preset =
                load_preset(find_preset(options->preset, presets_dir()), options->overrides);
            const PresetOutcome outcome = run_preset(preset, options->output);
            std::cout << "\n"
                      << teach::render_zero(teach::zero_rows(preset.runs, outcome.runs))
                      << "\nresults: " << outcome.dir << "\n";
            return 0;
          }};
}

}  // namespace

Command add_teach_command(CLI::App& parent) {
  CLI::App* teach =
      parent.add_subcommand("teach", "step-by-step demos of how the strategies move data");
  teach->require_subcommand(1);
  std::vector<Command> lessons = {add_ring_lesson(*teach), add_dp_vs_ddp_lesson(*teach),
                                  add_hierarchical_lesson(*teach), add_zero_lesson(*teach)};
  return {teach, [lessons = std::move(lessons)] { return run_parsed(lessons); }};
}

}  // namespace gradsync
