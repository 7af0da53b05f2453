#include "allreduce/make_communicator.h"

#include <string>

#include "allreduce/hierarchical/hierarchical_communicator.h"
#include "allreduce/hierarchical/host_layout.h"
#include "allreduce/shm/shm_communicator.h"
#include "common/error.h"
#include "common/host_id.h"
#ifdef GRADSYNC_HAVE_GLOO
#include "allreduce/gloo/gloo_communicator.h"
#endif
#ifdef GRADSYNC_HAVE_MPI
#include "allreduce/mpi/mpi_communicator.h"
#endif
#ifdef GRADSYNC_HAVE_NCCL
#include "allreduce/nccl/nccl_communicator.h"
#endif

namespace gradsync {

namespace {

std::shared_ptr<Communicator> make_gloo(Store& store, int rank, int size,
                                        const CommunicatorOptions& options) {
#ifdef GRADSYNC_HAVE_GLOO
  GlooOptions gloo;
  gloo.timeout = options.tcp.timeout;
  gloo.algorithm = options.algorithm == "default" ? "ring" : options.algorithm;
  gloo.bind_host = options.tcp.bind_host;
  // Beside the ring's keys in the same Store, never in their way.
  gloo.store_prefix = options.tcp.store_prefix + "/gloo";
  gloo.check_desync = options.desync_check;
  gloo.pairs = options.gloo_pairs;
  return make_gloo_communicator(store, rank, size, gloo);
#else
  (void)store, (void)rank, (void)size, (void)options;
  throw ConfigError("comm", "comm.backend",
                    "gloo is not in this gradsync: install Debian's libgloo-dev and rebuild");
#endif
}

// comm.algorithm names gloo's algorithms; every other backend has one all-reduce of its own.
void require_default_algorithm(const CommunicatorOptions& options, const std::string& backend,
                               const std::string& note = "") {
  if (options.algorithm == "default") return;
  throw ConfigError(
      "comm", "comm.algorithm",
      "'" + options.algorithm + "' is gloo's; " + backend + " takes only default" + note);
}

std::shared_ptr<Communicator> make_mpi(Store& store, int rank, int size,
                                       const CommunicatorOptions& options) {
#ifdef GRADSYNC_HAVE_MPI
  require_default_algorithm(options, "mpi", " (MPI chooses)");
  MpiOptions mpi;
  mpi.timeout = options.tcp.timeout;
  // Beside the ring's keys in the same Store, never in their way.
  mpi.store_prefix = options.tcp.store_prefix + "/mpi";
  mpi.check_desync = options.desync_check;
  return make_mpi_communicator(store, rank, size, mpi);
#else
  (void)store, (void)rank, (void)size, (void)options;
  throw ConfigError("comm", "comm.backend",
                    "mpi is not in this gradsync: install Debian's libopenmpi-dev and openmpi-bin "
                    "and rebuild");
#endif
}

std::shared_ptr<Communicator> make_shm(Store& store, int rank, int size,
                                       const CommunicatorOptions& options, int machine_ranks = 0) {
  require_default_algorithm(options, "shm");
  ShmOptions shm;
  shm.timeout = options.tcp.timeout;
  // Beside the ring's keys in the same Store, never in their way.
  shm.store_prefix = options.tcp.store_prefix + "/shm";
  shm.run_id = options.run_id;
  shm.machine_ranks = machine_ranks;
  return make_shm_communicator(store, rank, size, shm);
}

// Collective: every rank publishes its host id and reads everyone's. Where shared memory is not
// allowed (link emulation must see every byte) every rank counts as a host of its own.
std::vector<std::string> host_ids(Store& store, int rank, int size,
                                  const CommunicatorOptions& options) {
  std::vector<std::string> ids;
  if (!options.shm_on_one_host) {
    for (int r = 0; r < size; ++r) ids.push_back("rank " + std::to_string(r));
    return ids;
  }
  const std::string prefix = options.tcp.store_prefix + "/auto/host/";
  store.set(prefix + std::to_string(rank),
            options.host_id.empty() ? this_host_id() : options.host_id);
  for (int r = 0; r < size; ++r) {
    ids.push_back(store.get(prefix + std::to_string(r), options.tcp.timeout));
  }
  return ids;
}

// Shared memory within this rank's host, the leaders' ring (or gloo) between hosts, each level
// with the timeout its place in the nesting needs (allreduce/hierarchical/).
std::shared_ptr<Communicator> make_hierarchical(Store& store, int rank, const HostLayout& layout,
                                                const CommunicatorOptions& options) {
  const std::string host = options.tcp.store_prefix + "/hier/host" + std::to_string(layout.host);
  // Simulated hosts share this machine's cores: spin only where the whole world has one each.
  const int world = static_cast<int>(layout.host_of_rank.size());
  const auto level_options = [&](const std::string& prefix, int timeouts) {
    CommunicatorOptions level = options;
    level.tcp.store_prefix = prefix;
    level.tcp.timeout = timeouts * options.tcp.timeout;
    return level;
  };
  HierarchyLevels levels;
  CommunicatorOptions level = level_options(host, 1);
  level.algorithm = "default";
  levels.in_host = make_shm(store, layout.local_rank, layout.local_size(), level, world);
  level = level_options(host + "/after", 3);
  level.algorithm = "default";
  levels.from_leader = make_shm(store, layout.local_rank, layout.local_size(), level, world);
  if (layout.leader() && layout.hosts > 1) {
    level = level_options(options.tcp.store_prefix + "/hier/leaders", 2);
    levels.between_hosts = options.backend == "gloo"
                               ? make_gloo(store, layout.host, layout.hosts, level)
                               : make_tcp_ring(store, layout.host, layout.hosts, level.tcp);
  }
  return make_hierarchical_communicator(rank, layout, std::move(levels));
}

}  // namespace

std::shared_ptr<Communicator> make_communicator(Store& store, int rank, int size,
                                                const CommunicatorOptions& options) {
  const std::string& backend = options.backend;
  if (backend != "auto" && backend != "tcp" && backend != "shm" && backend != "gloo" &&
      backend != "mpi" && backend != "nccl") {
    throw ConfigError("comm", "comm.backend",
                      "unknown backend '" + backend + "' (valid: auto, tcp, shm, gloo, mpi, nccl)");
  }
  const bool host = options.device < 0;
  if (host != (backend != "nccl") && backend != "auto") {
    throw ConfigError("comm", "comm.backend",
                      host ? "nccl reduces GPU buffers, and these are in host memory"
                           : backend + " reduces host buffers, and these are on cuda:" +
                                 std::to_string(options.device));
  }
  if (backend == "shm") return make_shm(store, rank, size, options);
  const std::string& hierarchical = options.hierarchical;
  if (hierarchical != "auto" && hierarchical != "on" && hierarchical != "off") {
    throw ConfigError("comm", "comm.hierarchical",
                      "unknown mode '" + hierarchical + "' (valid: auto, on, off)");
  }
  if (hierarchical == "on" &&
      (!host || (backend != "auto" && backend != "tcp" && backend != "gloo"))) {
    throw ConfigError("comm", "comm.hierarchical",
                      "on reduces host buffers over shared memory within a host and tcp or gloo "
                      "between hosts, not with comm.backend " +
                          backend);
  }
  // auto picks within gradsync's own transports (auto, tcp); gloo is hierarchical only when on.
  const bool auto_hierarchy = hierarchical == "auto" && (backend == "auto" || backend == "tcp");
  if (host && size > 1 && (hierarchical == "on" || auto_hierarchy || backend == "auto")) {
    const HostLayout layout = host_layout(host_ids(store, rank, size, options), rank);
    if (hierarchical == "on" || (auto_hierarchy && layout.mixed())) {
      return make_hierarchical(store, rank, layout, options);
    }
    if (backend == "auto" && layout.hosts == 1) return make_shm(store, rank, size, options);
  }
  if (backend == "gloo") return make_gloo(store, rank, size, options);
  if (backend == "mpi") return make_mpi(store, rank, size, options);
  if (host) return make_tcp_ring(store, rank, size, options.tcp);
#ifdef GRADSYNC_HAVE_NCCL
  NcclOptions nccl;
  nccl.device = options.device;
  nccl.timeout = options.tcp.timeout;
  // Beside the ring's keys in the same Store, never in their way.
  nccl.store_prefix = options.tcp.store_prefix + "/nccl";
  std::shared_ptr<NcclCommunicator> comm = NcclCommunicator::create(store, rank, size, nccl);
  comm->set_producer_stream(options.producer_stream);
  return comm;
#else
  throw Error("communicator for CUDA device " + std::to_string(options.device) +
              ": this gradsync was built without NCCL");
#endif
}

std::vector<std::string> compiled_backends() {
  std::vector<std::string> names = {"auto", "tcp", "shm"};
#ifdef GRADSYNC_HAVE_GLOO
  names.push_back("gloo");
#endif
#ifdef GRADSYNC_HAVE_MPI
  names.push_back("mpi");
#endif
  if (nccl_compiled_in()) names.push_back("nccl");
  return names;
}

std::vector<std::pair<std::string, std::string>> backend_library_versions() {
  std::vector<std::pair<std::string, std::string>> versions;
#ifdef GRADSYNC_HAVE_GLOO
  versions.emplace_back("gloo", gloo_version());
#endif
#ifdef GRADSYNC_HAVE_MPI
  versions.emplace_back("mpi", mpi_library_version());
#endif
#ifdef GRADSYNC_HAVE_NCCL
  versions.emplace_back("nccl", NcclCommunicator::version());
#endif
  return versions;
}

bool nccl_compiled_in() {
#ifdef GRADSYNC_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

}  // namespace gradsync
