#include "apps/bench_allreduce_command.h"

#include <chrono>
#include <iostream>
#include <memory>
#include <string>

#include "apps/size_options.h"
#include "bench/collective_bench.h"

namespace gradsync {

Command add_bench_allreduce_command(CLI::App& bench) {
  struct Options {
    CollectiveBenchOptions bench;
    // As typed, for the error message; the sizes are parsed after the command line.
    std::string min_size = "4K";
    std::string max_size = "64M";
    double timeout_s = 60;
  };
  auto options = std::make_shared<Options>();
  CollectiveBenchOptions& o = options->bench;
  CLI::App* allreduce = bench.add_subcommand(
      "allreduce",
      "collective bandwidth of TcpRing (and Gloo) on loopback, or of NCCL on GPUs, as nccl-tests");
  allreduce->add_option("-b,--minbytes", options->min_size, "smallest size: 512, 4K, 64M, 1G")
      ->check(byte_size(sizeof(float)))
      ->capture_default_str();
  allreduce->add_option("-e,--maxbytes", options->max_size, "largest size")
      ->check(byte_size(sizeof(float)))
      ->capture_default_str();
  allreduce->add_option("-f,--stepfactor", o.factor, "each size is the previous one times this")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  allreduce->add_option("-n,--ranks", o.ranks, "ranks, run as threads of this process")
      ->check(CLI::Range(1, kMaxRanks))
      ->capture_default_str();
  allreduce->add_option("--op", o.op, "collective to measure")
      ->check(CLI::IsMember({"allreduce", "broadcast", "allgather"}))
      ->capture_default_str();
  allreduce->add_option("-w,--warmup", o.warmup, "untimed iterations per size")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  allreduce->add_option("--iters", o.iters, "timed iterations per size (0: enough for about 0.3 s)")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  allreduce->add_option("--timeout-s", options->timeout_s, "deadline of every wait")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  allreduce->add_flag("--json", o.json, "one JSON object per size");
  allreduce->add_flag("!--no-gloo", o.gloo, "leave out Gloo's columns");
  allreduce
      ->add_option("--device", o.device,
                   "cpu (TcpRing), or gpu (NCCL, one rank per GPU; --ranks default: "
                   "every visible GPU)")
      ->check(CLI::IsMember({"cpu", "gpu"}))
      ->capture_default_str();

  return {allreduce, [options, allreduce] {
            CollectiveBenchOptions run = options->bench;
            run.min_bytes = parse_size(options->min_size);  // checked while parsing: byte_size
            run.max_bytes = parse_size(options->max_size);
            if (run.max_bytes < run.min_bytes) {
              throw UsageError("--maxbytes: " + options->max_size + " is smaller than --minbytes " +
                               options->min_size);
            }
            run.timeout =
                std::chrono::milliseconds(static_cast<long long>(options->timeout_s * 1000));
            // On GPUs the natural default is one rank per visible GPU, not the CPU default of 2.
            if (run.device == "gpu" && allreduce->count("--ranks") == 0) run.ranks = 0;
            const CollectiveBenchReport report = run_collective_bench_report(run);
            std::cout << report.text;
            if (report.wrong == 0 && report.gloo_wrong == 0) return 0;
            std::cerr << "gradsync: error: bench allreduce: " << report.wrong
                      << " wrong elements from gradsync's collective, " << report.gloo_wrong
                      << " from Gloo's (#wrong columns above)\n";
            return 1;
          }};
}

}  // namespace gradsync
