#include "apps/bench_allreduce_command.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "apps/size_options.h"
#include "bench/collective_bench.h"
#include "bench/collective_launch.h"
#include "common/error.h"
#include "launch/mpirun_command.h"

namespace gradsync {
namespace {

// Writes each piece at once, so that a row is seen as soon as it completes (a pipe or a file
// would otherwise hold it in stdio's buffer until the sweep ends).
BenchSink flushed(std::FILE* to) {
  return [to](const std::string& text) {
    std::fwrite(text.data(), 1, text.size(), to);
    std::fflush(to);
  };
}

// Rank 0 of --ranks-as processes prints to the descriptor its launcher passed; anywhere else
// (mpirun forwards each rank's stdout) to stdout.
std::FILE* table_stream() {
  const char* fd = std::getenv(kTableFdVariable);
  if (fd == nullptr) return stdout;
  std::FILE* stream = ::fdopen(std::atoi(fd), "w");
  if (stream == nullptr) throw Error(std::string("bench: cannot write to ") + kTableFdVariable);
  return stream;
}

[[noreturn]] void exec_mpirun(const CollectiveBenchOptions& options) {
  std::vector<std::string> args = mpirun_argv(options);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  // torchrun's names would win over mpirun's in launch/rendezvous_env.h.
  for (const std::string& name : variables_mpirun_ranks_must_not_inherit()) {
    ::unsetenv(name.c_str());
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // Replaced, not run as a child: mpirun's output (rank 0's table) and exit code become the
  // command's own, and mpirun stops every rank when one fails.
  ::execvp(argv[0], argv.data());
  throw Error(std::string("bench allreduce --ranks-as mpirun: cannot run mpirun (") +
              std::strerror(errno) + "); Debian's openmpi-bin has it");
}

}  // namespace

Command add_bench_allreduce_command(CLI::App& bench) {
  struct Options {
    CollectiveBenchOptions bench;
    // As typed, for the error message; the sizes are parsed after the command line.
    std::string min_size = "4K";
    std::string max_size = "64M";
    double timeout_s = 60;
    std::string desync_check = "on";
    bool no_gloo = false;
    bool rank_process = false;
    int store_port = 0;
  };
  auto options = std::make_shared<Options>();
  CollectiveBenchOptions& o = options->bench;
  CLI::App* allreduce =
      bench.add_subcommand("allreduce",
                           "collective bandwidth of gradsync's backends (tcp, shm, gloo, mpi) on "
                           "loopback or shared memory, or of NCCL on "
                           "GPUs, as nccl-tests prints it");
  allreduce->add_option("-b,--minbytes", options->min_size, "smallest size: 512, 4K, 64M, 1G")
      ->check(byte_size(sizeof(float)))
      ->capture_default_str();
  allreduce->add_option("-e,--maxbytes", options->max_size, "largest size")
      ->check(byte_size(sizeof(float)))
      ->capture_default_str();
  allreduce->add_option("-f,--stepfactor", o.factor, "each size is the previous one times this")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  allreduce->add_option("-n,--ranks", o.ranks, "ranks (see --ranks-as)")
      ->check(CLI::Range(1, kMaxRanks))
      ->capture_default_str();
  allreduce->add_option("--op", o.op, "collective to measure")
      ->check(CLI::IsMember({"allreduce", "broadcast", "allgather"}))
      ->capture_default_str();
  allreduce
      ->add_option(
          "--backend", o.backends,
          "backends, each size running them in turn: tcp, shm, gloo, mpi (default: tcp and "
          "gloo where built)")
      ->delimiter(',');
  allreduce
      ->add_option("--ranks-as", o.ranks_as,
                   "threads (of this process), processes (started by gradsync) or mpirun "
                   "(default: mpirun when --backend has mpi, else threads)")
      ->check(CLI::IsMember({"threads", "processes", "mpirun"}));
  allreduce
      ->add_option("-w,--warmup", o.warmup,
                   "iterations per size and form before the timed ones (with --iters 0 at least "
                   "3, each timed: the slowest rank's median sets the count)")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  allreduce
      ->add_option("--iters", o.iters,
                   "timed iterations per size and form (0: enough for about --seconds)")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  allreduce
      ->add_option("--seconds", o.seconds,
                   "with --iters 0, timed work per size and form (5 to 1000 iterations); longer "
                   "averages out more of a busy machine's noise")
      ->check(CLI::Range(0.001, 3600.0))
      ->capture_default_str();
  allreduce->add_option("--timeout-s", options->timeout_s, "deadline of every wait")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  allreduce->add_flag("--json", o.json, "one JSON document instead of the table");
  allreduce
      ->add_option("--desync-check", options->desync_check,
                   "gloo and mpi: compare each collective across ranks before running it "
                   "(comm.desync_check); off measures the library under the wrapper alone")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  allreduce
      ->add_option("--gloo-algorithm", o.gloo_algorithm, "gloo: its allreduce (comm.algorithm)")
      ->check(CLI::IsMember({"ring", "ring_chunked", "halving_doubling"}))
      ->capture_default_str();
  allreduce
      ->add_option("--gloo-pairs", o.gloo_pairs,
                   "gloo: the pairs its allreduce runs on (comm.gloo_pairs; sync and busy_poll "
                   "with --gloo-algorithm halving_doubling)")
      ->check(CLI::IsMember({"async", "sync", "busy_poll"}))
      ->capture_default_str();
  allreduce
      ->add_option("--device", o.device,
                   "cpu, or gpu (NCCL, one rank per GPU; --ranks default: every visible GPU)")
      ->check(CLI::IsMember({"cpu", "gpu"}))
      ->capture_default_str();
  // Gone: said, not silently accepted, so a script using it learns what replaced it.
  allreduce->add_flag("--no-gloo", options->no_gloo)->group("");
  // Internal: one rank of --ranks-as processes or mpirun (bench/collective_launch.h).
  allreduce->add_flag("--rank-process", options->rank_process)->group("");
  allreduce->add_option("--store-port", options->store_port)
      ->check(CLI::Range(1, 65535))
      ->group("");

  return {allreduce, [options, allreduce] {
            if (options->no_gloo) {
              throw UsageError(
                  "--no-gloo is gone: --backend names what runs (--backend tcp for TcpRing "
                  "alone)");
            }
            CollectiveBenchOptions run = options->bench;
            run.min_bytes = parse_size(options->min_size);  // checked while parsing: byte_size
            run.max_bytes = parse_size(options->max_size);
            if (run.max_bytes < run.min_bytes) {
              throw UsageError("--maxbytes: " + options->max_size + " is smaller than --minbytes " +
                               options->min_size);
            }
            run.timeout =
                std::chrono::milliseconds(static_cast<long long>(options->timeout_s * 1000));
            run.desync_check = options->desync_check == "on";
            if (run.gloo_pairs != "async" && run.gloo_algorithm != "halving_doubling") {
              throw UsageError("--gloo-pairs: " + run.gloo_pairs +
                               " pairs take --gloo-algorithm halving_doubling only");
            }
            // On GPUs the natural default is one rank per visible GPU, not the CPU default of 2.
            if (run.device == "gpu" && allreduce->count("--ranks") == 0) run.ranks = 0;
            try {
              run = resolve_backends(run);
            } catch (const ConfigError& e) {
              // A backend that is unknown or not built is how it was called: exit 2, one line
              // naming the option ("--backend: ..."), without the "bench: " of ConfigError.
              throw UsageError(std::string(e.what()).substr(e.where().size() + 2));
            }

            CollectiveBenchReport report;
            if (options->rank_process) {
              if (options->store_port == 0) throw UsageError("--rank-process needs --store-port");
              report = run_collective_bench_rank(run, options->store_port, flushed(table_stream()));
            } else if (run.ranks_as == "mpirun") {
              exec_mpirun(run);
            } else if (run.ranks_as == "processes") {
              run_rank_processes(run);  // rank 0 checked the elements and failed on wrong ones
              return 0;
            } else {
              report = run_collective_bench_report(run, flushed(stdout));
            }
            if (report.wrong == 0) return 0;
            std::cerr << "gradsync: error: bench allreduce: " << report.wrong
                      << " wrong elements (#wrong columns above)\n";
            return 1;
          }};
}

}  // namespace gradsync
