#include "apps/teach_command.h"

#include <iostream>
#include <memory>
#include <vector>

#include "experiments/teach/ring_schedule.h"

namespace gradsync {
namespace {

// One lesson: its sub-subcommand and what to do when that one was parsed. A new lesson is a
// function like add_ring_lesson plus one line in add_teach_command.
struct Lesson {
  CLI::App* app;
  std::function<int()> run;
};

Lesson add_ring_lesson(CLI::App& teach) {
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

}  // namespace

TeachCommand add_teach_command(CLI::App& parent) {
  CLI::App* teach =
      parent.add_subcommand("teach", "step-by-step demos of how the strategies move data");
  teach->require_subcommand(1);
  std::vector<Lesson> lessons;
  lessons.push_back(add_ring_lesson(*teach));
  return {teach, [lessons = std::move(lessons)] {
            for (const Lesson& lesson : lessons) {
              if (lesson.app->parsed()) return lesson.run();
            }
            return 0;  // unreachable: require_subcommand(1) makes parsing fail first
          }};
}

}  // namespace gradsync
