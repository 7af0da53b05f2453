#include "allreduce/make_communicator.h"

#include <string>

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
                                       const CommunicatorOptions& options) {
  require_default_algorithm(options, "shm");
  ShmOptions shm;
  shm.timeout = options.tcp.timeout;
  // Beside the ring's keys in the same Store, never in their way.
  shm.store_prefix = options.tcp.store_prefix + "/shm";
  shm.run_id = options.run_id;
  return make_shm_communicator(store, rank, size, shm);
}

// Collective: every rank publishes its host id and reads everyone's.
bool every_rank_on_this_host(Store& store, int rank, int size, const CommunicatorOptions& options) {
  const std::string prefix = options.tcp.store_prefix + "/auto/host/";
  const std::string mine = this_host_id();
  store.set(prefix + std::to_string(rank), mine);
  bool same = true;
  for (int r = 0; r < size; ++r) {
    same = store.get(prefix + std::to_string(r), options.tcp.timeout) == mine && same;
  }
  return same;
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
  if (backend == "auto" && host && options.shm_on_one_host && size > 1 &&
      every_rank_on_this_host(store, rank, size, options)) {
    return make_shm(store, rank, size, options);
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
