#include "bench/collective_bench.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <memory>

#include "allreduce/communicator.h"
#include "allreduce/gloo/gloo_communicator.h"  // gloo_compiled_in(), gloo_version()
#include "allreduce/make_communicator.h"
#include "allreduce/mpi/mpi_communicator.h"  // mpi_library_version()
#include "allreduce/tcp/socket.h"
#include "allreduce/tcp/tcp_store.h"
#include "bench/collective_table.h"
#include "bench/nccl_bench.h"
#include "common/error.h"
#include "launch/inherited_socket.h"
#include "launch/rendezvous_env.h"

namespace gradsync {
namespace {

constexpr const char* kWhere = "bench";

// A backend's rank: the Communicator make_communicator gives for comm.backend.
class CommRank final : public BenchRank {
 public:
  CommRank(const CollectiveOp& op, std::shared_ptr<Communicator> comm)
      : op_(op), comm_(std::move(comm)) {}
  void barrier() override { comm_->barrier(); }
  void run(RankBuffers& buffers, bool in_place) override { op_.run(*comm_, buffers, in_place); }
  void abort(const std::string& reason) { comm_->abort(reason); }

 private:
  const CollectiveOp& op_;
  std::shared_ptr<Communicator> comm_;
};

struct BackendInfo {
  const char* name;
  const char* package;  // the Debian package that brings it, for a build without it
};
constexpr BackendInfo kCpuBackends[] = {
    {"tcp", ""}, {"shm", ""}, {"gloo", "libgloo-dev"}, {"mpi", "libopenmpi-dev and openmpi-bin"}};

bool compiled_in(const std::string& backend) {
  const std::vector<std::string> built = compiled_backends();
  return std::find(built.begin(), built.end(), backend) != built.end();
}

// One line on what runs underneath, for the header's "Using backends".
std::string describe(const std::string& backend, const std::string& gpu_transport,
                     const CollectiveBenchOptions& o) {
  if (backend == "tcp") return "gradsync TcpRing: ring over TCP sockets, 127.0.0.1";
  if (backend == "shm") {
    return "gradsync ShmCommunicator: one shared-memory segment, each rank sums 1/N of every "
           "chunk (one copy in, one out), futex barriers";
  }
  if (backend == "gloo") {
    std::string version = "?";
#ifdef GRADSYNC_HAVE_GLOO
    version = gloo_version();
#endif
    // Gloo's older two reduce in place: out of place, the communicator copies the input first.
    const std::string allreduce =
        o.gloo_algorithm == "ring"
            ? "gloo::allreduce ring"
            : (o.gloo_algorithm == "ring_chunked" ? "gloo::AllreduceRingChunked"
                                                  : "gloo::AllreduceHalvingDoubling") +
                  std::string(" (out of place: the input copied in first)");
    const std::string pairs =
        o.gloo_pairs == "async"
            ? ""
            : " on " + o.gloo_pairs + " pairs (in pieces of at most net.core.wmem_max bytes)";
    return "gradsync GlooCommunicator: Gloo " + version + " " + allreduce + pairs +
           " (broadcast: binomial tree; allgather: ring), Gloo's TCP transport, 127.0.0.1";
  }
  if (backend == "mpi") {
    std::string version = "?";
#ifdef GRADSYNC_HAVE_MPI
    version = mpi_library_version();
#endif
    return "gradsync MpiCommunicator: " + version +
           ", MPI_Allreduce (MPI_Bcast, MPI_Allgather) on the calling thread under "
           "MPI_THREAD_MULTIPLE, a watchdog keeping its deadline (MPI_Iallreduce polled under "
           "SERIALIZED), each after its 32-byte desync-check allgather (--desync-check on)";
  }
  return gpu_transport;
}

void validate(const CollectiveBenchOptions& o) {
  find_collective_op(o.op);
  auto fail = [](const std::string& key, const std::string& problem) {
    throw ConfigError(kWhere, key, problem);
  };
  if (o.ranks < 1 || o.ranks > kMaxRanks) {
    fail("--ranks",
         "must be 1.." + std::to_string(kMaxRanks) + " (got " + std::to_string(o.ranks) + ")");
  }
  if (o.min_bytes < sizeof(float)) fail("--minbytes", "must be at least 4 (one float)");
  if (o.max_bytes < o.min_bytes) fail("--maxbytes", "is smaller than --minbytes");
  if (o.factor < 2) fail("--stepfactor", "must be at least 2");
  if (o.warmup < 0) fail("--warmup", "must not be negative");
  if (o.iters < 0) fail("--iters", "must not be negative (0 means auto)");
  if (!(o.seconds > 0)) fail("--seconds", "must be positive");
  if (o.timeout.count() <= 0) fail("--timeout", "must be positive");
}

std::vector<std::size_t> sweep_sizes(const CollectiveBenchOptions& o) {
  std::vector<std::size_t> sizes;
  const auto factor = static_cast<std::size_t>(o.factor);
  for (std::size_t s = o.min_bytes;; s *= factor) {
    sizes.push_back(s);
    // Stop before the next size would pass max (or overflow).
    if (s > o.max_bytes / factor) break;
  }
  return sizes;
}

// What both ways of running ranks share: the checked options, the sweep and the table.
struct Plan {
  CollectiveBenchOptions options;
  SweepSpec spec;
  TableInfo info;
};

Plan make_plan(const CollectiveBenchOptions& requested, const std::string& gpu_transport) {
  Plan plan;
  plan.options = resolve_backends(requested);
  const CollectiveBenchOptions& o = plan.options;
  validate(o);
  const CollectiveOp& op = find_collective_op(o.op);
  plan.spec = {.op = &op,
               .ranks = o.ranks,
               .sizes = sweep_sizes(o),
               .warmup = o.warmup,
               .iters = o.iters,
               .seconds = o.seconds,
               .timeout = o.timeout};
  TableInfo& info = plan.info;
  info.op = &op;
  info.ranks = o.ranks;
  info.ranks_as = o.ranks_as;
  info.min_bytes = o.min_bytes;
  info.max_bytes = o.max_bytes;
  info.factor = o.factor;
  info.warmup = o.warmup;
  info.iters = o.iters;
  info.seconds = o.seconds;
  info.timeout_s = static_cast<double>(o.timeout.count()) / 1000.0;
  info.device = o.device;
  for (const std::string& backend : o.backends) {
    std::string description = describe(backend, gpu_transport, o);
    if (!o.desync_check && (backend == "gloo" || backend == "mpi")) {
      description += " (desync check off: --desync-check off)";
    }
    plan.info.backends.emplace_back(backend, description);
  }
  return plan;
}

// Every backend's rank for `rank`, connected in the plan's order (collective: every rank the
// same order), each under its own Store prefix.
std::vector<BackendRank> connect_backends(const Plan& plan, int rank, Store& store) {
  std::vector<BackendRank> ranks;
  for (const std::string& backend : plan.options.backends) {
    if (backend == "nccl") {
      ranks.push_back({backend, make_nccl_rank(*plan.spec.op, store, rank, plan.spec.ranks,
                                               plan.spec.timeout)});
      continue;
    }
    CommunicatorOptions options;
    options.backend = backend;
    options.tcp.timeout = plan.spec.timeout;
    options.tcp.store_prefix = "bench/" + backend;
    options.desync_check = plan.options.desync_check;
    if (backend == "gloo") {
      options.algorithm = plan.options.gloo_algorithm;
      options.gloo_pairs = plan.options.gloo_pairs;
    }
    ranks.push_back(
        {backend, std::make_unique<CommRank>(
                      *plan.spec.op, make_communicator(store, rank, plan.spec.ranks, options))});
  }
  return ranks;
}

// After a failure under mpirun: MPI_Finalize at exit would wait for the ranks still inside an MPI
// collective (until their timeout, 60 s by default), so the mpi communicator ends the job at
// once (MPI_Abort), saying which rank failed and why. Without an mpi backend, nothing.
void abort_mpi(std::vector<BackendRank>& backends, const std::string& reason) {
  for (BackendRank& backend : backends) {
    auto* comm = dynamic_cast<CommRank*>(backend.rank.get());
    if (backend.backend == "mpi" && comm != nullptr) comm->abort(reason);
  }
}

// Appends each piece to the report's text and hands it to the sink at once.
class Output {
 public:
  explicit Output(BenchSink sink) : sink_(std::move(sink)) {}
  void operator()(const std::string& text) {
    if (text.empty()) return;
    text_ += text;
    if (sink_) sink_(text);
  }
  std::string& text() { return text_; }

 private:
  BenchSink sink_;
  std::string text_;
};

}  // namespace

std::size_t parse_size(const std::string& text) {
  auto bad = [&]() -> ConfigError {
    return ConfigError(kWhere, "size", "'" + text + "' is not a size (examples: 512, 4K, 64M, 1G)");
  };
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) {
    ++digits;
  }
  if (digits == 0 || digits > 18) throw bad();  // 18 digits cannot overflow 64 bits
  std::size_t value = std::stoull(text.substr(0, digits));
  std::string suffix = text.substr(digits);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  // An empty suffix is bytes; K, M, G are powers of 1024, as in nccl-tests' -b and -e.
  const std::string units = "KMG";
  const auto unit = suffix.size() == 1
                        ? units.find(static_cast<char>(std::toupper((unsigned char)suffix[0])))
                        : std::string::npos;
  if (!suffix.empty() && unit == std::string::npos) throw bad();
  const int shift = suffix.empty() ? 0 : 10 * static_cast<int>(unit + 1);
  if (value > (std::numeric_limits<std::size_t>::max() >> shift)) throw bad();
  return value << shift;
}

CollectiveBenchOptions resolve_backends(const CollectiveBenchOptions& options) {
  CollectiveBenchOptions o = options;
  auto fail = [](const std::string& key, const std::string& problem) {
    throw ConfigError(kWhere, key, problem);
  };
  if (o.device == "gpu") {
    if (o.backends.empty()) o.backends = {"nccl"};
    if (o.backends != std::vector<std::string>{"nccl"}) {
      fail("--backend",
           "--device gpu runs nccl alone (tcp, shm, gloo and mpi reduce host buffers)");
    }
    if (o.ranks_as.empty()) o.ranks_as = "threads";
    if (o.ranks_as != "threads") {
      fail("--ranks-as", "--device gpu runs its ranks as threads, one per GPU");
    }
    return o;
  }
  if (o.device != "cpu") fail("--device", "'" + o.device + "' (valid: cpu, gpu)");
  if (o.backends.empty()) {
    o.backends = {"tcp"};
    if (gloo_compiled_in()) o.backends.push_back("gloo");
  }
  for (const std::string& name : o.backends) {
    // Twice would connect one backend twice under the same Store keys.
    if (std::count(o.backends.begin(), o.backends.end(), name) > 1) {
      fail("--backend", name + " is named twice");
    }
    const auto known = std::find_if(std::begin(kCpuBackends), std::end(kCpuBackends),
                                    [&](const BackendInfo& b) { return name == b.name; });
    if (name == "nccl") fail("--backend", "nccl reduces GPU buffers: use --device gpu");
    if (known == std::end(kCpuBackends)) {
      fail("--backend", "unknown backend '" + name + "' (valid: tcp, shm, gloo, mpi)");
    }
    if (!compiled_in(name)) {
      fail("--backend", name + " is not in this build of gradsync: install Debian's " +
                            known->package + " and rebuild");
    }
  }
  const bool mpi = std::find(o.backends.begin(), o.backends.end(), "mpi") != o.backends.end();
  if (o.ranks_as.empty()) o.ranks_as = mpi ? "mpirun" : "threads";
  if (o.ranks_as != "threads" && o.ranks_as != "processes" && o.ranks_as != "mpirun") {
    fail("--ranks-as", "'" + o.ranks_as + "' (valid: threads, processes, mpirun)");
  }
  if (mpi && o.ranks_as != "mpirun") {
    fail("--ranks-as",
         "the mpi backend needs one process per rank started by mpirun "
         "(--ranks-as mpirun, the default with mpi)");
  }
  return o;
}

CollectiveBenchReport run_collective_bench_report(const CollectiveBenchOptions& options,
                                                  const BenchSink& sink) {
  std::string gpu_transport;
  CollectiveBenchOptions requested = options;
  if (options.device == "gpu") {
    // Fills in ranks (every visible GPU for 0); refuses without NCCL or enough GPUs.
    gpu_transport = nccl_sweep_setup(requested.ranks).transport;
  }
  const Plan plan = make_plan(requested, gpu_transport);
  if (plan.options.ranks_as != "threads") {
    throw ConfigError(kWhere, "--ranks-as",
                      plan.options.ranks_as +
                          " starts one process per rank: "
                          "run_collective_bench_rank runs each (bench/collective_launch.h)");
  }
  CollectiveTable table(plan.info, plan.options.json);
  Output out(sink);
  out(table.header());
  sweep_threads(
      plan.spec, [&](int rank, Store& store) { return connect_backends(plan, rank, store); },
      [&](const RowResult& row) { out(table.row(row)); });
  out(table.footer());
  return {std::move(out.text()), table.wrong()};
}

std::string run_collective_bench(const CollectiveBenchOptions& options) {
  return run_collective_bench_report(options).text;
}

CollectiveBenchReport run_collective_bench_rank(const CollectiveBenchOptions& options,
                                                int store_port, const BenchSink& sink) {
  const Plan plan = make_plan(options, "");
  const RendezvousEnv env = read_rendezvous_env();
  if (env.world_size != plan.spec.ranks) {
    throw ConfigError(kWhere, "--ranks",
                      std::to_string(plan.spec.ranks) + " ranks, but the launcher (" + env.source +
                          ") started " + std::to_string(env.world_size));
  }
  const int rank = env.rank;
  TcpStoreOptions store_options;
  store_options.port = store_port;
  store_options.is_server = rank == 0;
  store_options.timeout = plan.spec.timeout;
  // The launcher holds the port for rank 0 (bench/collective_launch.cpp), which shares it.
  const char* held = std::getenv(kStorePortHeldEnv);
  if (rank == 0 && held != nullptr && std::string(held) == "1") {
    store_options.listen_fd = tcp::listen_on(store_options.host, store_port, {}, true).release();
  }
  // Declared first, so that it outlives every communicator made over it.
  const std::unique_ptr<Store> store = make_tcp_store(store_options);
  RankExchange exchange(*store, rank, plan.spec.ranks, plan.spec.timeout);
  CollectiveTable table(plan.info, plan.options.json);
  Output out(rank == 0 ? sink : BenchSink());
  std::vector<BackendRank> backends;
  try {
    if (rank == 0) out(table.header());
    backends = connect_backends(plan, rank, *store);
    sweep_rank(plan.spec, rank, backends, exchange,
               [&](const RowResult& row) { out(table.row(row)); });
  } catch (const std::exception& e) {
    exchange.fail(e.what());
    abort_mpi(backends, e.what());  // under mpirun, ends the job here (MPI_Abort)
    throw;
  }
  backends.clear();  // every communicator goes before the ranks say they have left
  // Rank 0 serves the Store: it leaves last, once no rank will ask it for anything.
  const std::string left = "bench/left/";
  if (rank != 0) {
    store->set(left + std::to_string(rank), "");
    return {};
  }
  std::vector<std::string> keys;
  for (int r = 1; r < plan.spec.ranks; ++r) keys.push_back(left + std::to_string(r));
  store->wait(keys, plan.spec.timeout);
  out(table.footer());
  return {std::move(out.text()), table.wrong()};
}

}  // namespace gradsync
