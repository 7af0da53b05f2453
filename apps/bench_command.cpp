#include "apps/bench_command.h"

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "apps/bench_allreduce_command.h"
#include "apps/size_options.h"
#include "bench/collective_bench.h"
#include "bench/mlp_throughput.h"
#include "bench/ps_bench.h"
#include "common/error.h"

namespace gradsync {
namespace {

Command add_mlp_bench(CLI::App& bench) {
  auto options = std::make_shared<MlpBenchOptions>();
  CLI::App* mlp =
      bench.add_subcommand("mlp", "training throughput of the MLP (CPU: one thread; or one GPU)");
  mlp->add_option("--hidden", options->hidden, "hidden widths")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  mlp->add_option("--batch", options->batch, "batch size")->check(CLI::Range(1, 1 << 20));
  mlp->add_option("--seconds", options->seconds, "timed seconds")
      ->check(CLI::Range(0.001, 86400.0));
  mlp->add_option("--warmup-steps", options->warmup_steps, "untimed steps first")
      ->check(CLI::Range(0, 1 << 30));
  mlp->add_flag("--json", options->json, "print one JSON object");
  mlp->add_option("--device", options->device, "cpu, or gpu (the CUDA MLP)")
      ->check(CLI::IsMember({"cpu", "gpu"}))
      ->capture_default_str();
  mlp->add_option("--gpu", options->gpu, "CUDA device ordinal with --device gpu")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  CLI::Option* graphs =
      mlp->add_option("--cuda-graphs", options->cuda_graphs,
                      "with --device gpu: each step one CUDA graph launch instead of ~20 kernel "
                      "launches (default on)")
          ->check(CLI::IsMember({"on", "off"}))
          ->type_name("TEXT");
  return {mlp, [options, graphs] {
            // Said rather than ignored: a CPU figure labelled with a GPU option would mislead.
            if (graphs->count() > 0 && options->device != "gpu") {
              throw ConfigError("bench mlp", "--cuda-graphs", "only with --device gpu");
            }
            std::cout << run_mlp_bench(*options) << "\n";
            return 0;
          }};
}

Command add_ps_bench(CLI::App& bench) {
  struct Options {
    PsBenchOptions bench;
    std::vector<std::string> sizes = {"1M", "16M"};  // as typed; parsed into bench.floats
  };
  auto options = std::make_shared<Options>();
  PsBenchOptions& o = options->bench;
  CLI::App* ps = bench.add_subcommand(
      "ps", "parameter-server push+pull round trip against raw ZeroMQ on loopback, paired");
  ps->add_option("--floats", options->sizes, "payload sizes in floats: 1M, 16M, 4096")
      ->delimiter(',')
      ->check(float_count(kPsBenchMaxFloats))
      ->capture_default_str();
  ps->add_option("--shards", o.shards, "parameter-server shards (K)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  ps->add_option("--rounds", o.rounds, "paired rounds per size (the ratio is their median)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  ps->add_option("--round-seconds", o.round_seconds,
                 "each side's share of one round (at least 5 round trips)")
      ->check(CLI::Range(0.001, 3600.0))
      ->capture_default_str();
  ps->add_flag("--json", o.json, "one JSON object per size");

  return {ps, [options] {
            PsBenchOptions run = options->bench;
            run.floats.clear();
            for (const std::string& size : options->sizes) {
              run.floats.push_back(parse_size(size));  // checked while parsing: float_count
            }
            const std::vector<PsBenchRow> rows = run_ps_bench_rows(run);
            std::cout << render_ps_bench(run, rows);
            for (const PsBenchRow& row : rows) {
              if (row.wrong == 0) continue;
              std::cerr << "gradsync: error: bench ps: " << row.wrong << " of " << row.floats
                        << " parameters differ from a local replay of the steps\n";
              return 1;
            }
            return 0;
          }};
}

}  // namespace

Command add_bench_command(CLI::App& parent) {
  CLI::App* bench = parent.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  std::vector<Command> benchmarks = {add_mlp_bench(*bench), add_bench_allreduce_command(*bench),
                                     add_ps_bench(*bench)};
  return {bench, [benchmarks = std::move(benchmarks)] { return run_parsed(benchmarks); }};
}

}  // namespace gradsync
