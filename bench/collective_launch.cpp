#include "bench/collective_launch.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "allreduce/tcp/socket.h"
#include "bench/sprint.h"
#include "common/error.h"
#include "launch/inherited_socket.h"
#include "launch/launcher.h"
#include "launch/mpirun_command.h"

namespace gradsync {

std::vector<std::string> rank_process_args(const CollectiveBenchOptions& o, int store_port) {
  std::string backends;
  for (const std::string& b : o.backends) backends += (backends.empty() ? "" : ",") + b;
  // Sizes in plain bytes and the timeout in seconds: what the command line reads back exactly.
  std::vector<std::string> args = {"bench",
                                   "allreduce",
                                   "--op",
                                   o.op,
                                   "-b",
                                   std::to_string(o.min_bytes),
                                   "-e",
                                   std::to_string(o.max_bytes),
                                   "-f",
                                   std::to_string(o.factor),
                                   "-n",
                                   std::to_string(o.ranks),
                                   "-w",
                                   std::to_string(o.warmup),
                                   "--iters",
                                   std::to_string(o.iters),
                                   "--seconds",
                                   sprint("%.17g", o.seconds),
                                   "--timeout-s",
                                   sprint("%.3f", static_cast<double>(o.timeout.count()) / 1000),
                                   "--backend",
                                   backends,
                                   "--ranks-as",
                                   o.ranks_as,
                                   "--rank-process",
                                   "--store-port",
                                   std::to_string(store_port)};
  if (o.json) args.push_back("--json");
  if (!o.desync_check) args.insert(args.end(), {"--desync-check", "off"});
  args.insert(args.end(), {"--gloo-algorithm", o.gloo_algorithm, "--gloo-pairs", o.gloo_pairs});
  return args;
}

void run_rank_processes(const CollectiveBenchOptions& options) {
  // Held until every rank has exited; rank 0 shares it (launch/inherited_socket.h).
  const tcp::Socket held = tcp::hold_port("127.0.0.1");
  const int port = tcp::local_port(held);
  std::fflush(stdout);
  // dup() leaves close-on-exec off, so the children inherit this descriptor: rank 0 writes to
  // the same open file as this process's stdout (a terminal, a pipe, or a file at its offset).
  const int table_fd = ::dup(STDOUT_FILENO);
  if (table_fd < 0) throw Error("bench: cannot duplicate stdout for rank 0's table");
  std::vector<ProcessSpec> processes;
  for (int rank = 0; rank < options.ranks; ++rank) {
    ProcessSpec spec;
    spec.name = "rank " + std::to_string(rank);
    spec.argv.push_back(current_executable());
    for (std::string& arg : rank_process_args(options, port)) spec.argv.push_back(std::move(arg));
    // torchrun's names: launch/rendezvous_env.h reads them first, before any outer launcher's.
    spec.env = {
        {"RANK", std::to_string(rank)},       {"WORLD_SIZE", std::to_string(options.ranks)},
        {"LOCAL_RANK", std::to_string(rank)}, {"LOCAL_WORLD_SIZE", std::to_string(options.ranks)},
        {"MASTER_ADDR", "127.0.0.1"},         {kStorePortHeldEnv, "1"}};
    if (rank == 0) spec.env.emplace_back(kTableFdVariable, std::to_string(table_fd));
    processes.push_back(std::move(spec));
  }
  try {
    launch(processes, LaunchOptions{});
  } catch (...) {
    ::close(table_fd);
    throw;
  }
  ::close(table_fd);
}

std::vector<std::string> mpirun_argv(const CollectiveBenchOptions& options) {
  // The command `gradsync run` starts mpi runs with (Open MPI over TCP between the ranks, as
  // the plain MPI peer is run), so the bench measures what training gets.
  MpirunOptions mpirun;
  mpirun.ranks = options.ranks;
  mpirun.as_root = ::geteuid() == 0;
  // This process becomes mpirun: the held port's descriptor, left open across exec, is held by
  // mpirun until it ends (it closes inherited descriptors in its ranks, not in itself).
  tcp::Socket held = tcp::hold_port("127.0.0.1");
  const int port = tcp::local_port(held);
  ::fcntl(held.release(), F_SETFD, 0);
  mpirun.exported = {{kStorePortHeldEnv, "1"}};
  std::vector<std::string> program = {current_executable()};
  for (std::string& arg : rank_process_args(options, port)) {
    program.push_back(std::move(arg));
  }
  return mpirun_command(find_mpirun(), mpirun, program);
}

}  // namespace gradsync
