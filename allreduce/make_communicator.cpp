#include "allreduce/make_communicator.h"

#include <string>

#include "common/error.h"
#ifdef GRADSYNC_HAVE_NCCL
#include "allreduce/nccl/nccl_communicator.h"
#endif

namespace gradsync {

std::shared_ptr<Communicator> make_communicator(Store& store, int rank, int size,
                                                const CommunicatorOptions& options) {
  if (options.device < 0) return make_tcp_ring(store, rank, size, options.tcp);
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

bool nccl_compiled_in() {
#ifdef GRADSYNC_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

}  // namespace gradsync
