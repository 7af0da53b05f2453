// make_communicator: the Communicator of `backend` (comm.backend) for where a rank's buffers
// live. auto: ShmCommunicator for host memory when every rank is on one host and
// shm_on_one_host allows it, a HierarchicalCommunicator (shared memory within each host, tcp
// between them) for ranks on several hosts with several on one, else TcpRing; NcclCommunicator for
// a CUDA device; tcp, shm (allreduce/shm/, ranks of one host), gloo (allreduce/gloo/) and mpi
// (allreduce/mpi/, ranks started by mpirun) reduce host buffers, nccl device ones, ordered after
// `producer_stream` (the model's stream, so bucket reductions start after their layer's gradient
// kernels; see allreduce/nccl/nccl_communicator.h).
//
//   CommunicatorOptions options;
//   options.tcp = ring_options;            // timeout and store prefix are shared by both
//   options.device = model.device();
//   options.producer_stream = model_stream(model);        // model/cuda/cuda_mlp.h; may be null
//   std::shared_ptr<Communicator> comm = make_communicator(store, rank, world, options);
//
// Collective: every rank calls it. Throws ConfigError (key comm.backend) for a backend this
// build lacks, naming the Debian package, or one that cannot reach these buffers; Error for a
// device in a build without NCCL. The Store must outlive the communicator.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "allreduce/communicator.h"
#include "allreduce/store.h"
#include "allreduce/tcp/tcp_ring.h"

struct CUstream_st;  // cudaStream_t's pointee, so this header needs no CUDA headers

namespace gradsync {

struct CommunicatorOptions {
  std::string backend = "auto";            // auto | tcp | shm | gloo | mpi | nccl (comm.backend)
  std::string algorithm = "default";       // comm.algorithm: gloo's ring, ring_chunked, ...
  std::string gloo_pairs = "async";        // comm.gloo_pairs: async | sync | busy_poll
  TcpRingOptions tcp;                      // timeout and bind_host for every backend; the rest
                                           // for TcpRing only
  int device = -1;                         // -1: host buffers (TcpRing); else CUDA ordinal (NCCL)
  CUstream_st* producer_stream = nullptr;  // NCCL: collectives wait for this stream's work
  bool desync_check = true;                // gloo, mpi: the header exchange (comm.desync_check)
  std::uint64_t run_id = 0;                // shm: names its segment (common/run_id.h)
  // auto on host buffers: shm when every rank is on this host (their host ids, exchanged
  // through the store, agree), else tcp. Off where link emulation must see every byte.
  bool shm_on_one_host = false;
  // comm.hierarchical: auto | on | off. auto: backend auto or tcp on host buffers, where the
  // ranks span hosts and some host has several (allreduce/hierarchical/); on: always, also over
  // gloo between hosts; off: one flat communicator. Hosts as shm_on_one_host sees them: where it
  // is off every rank is a host of its own.
  std::string hierarchical = "auto";
  // This rank's host as the others compare it; empty: this_host_id() (common/host_id.h). Set by
  // tests that group the threads of one process into hosts.
  std::string host_id;
};

std::shared_ptr<Communicator> make_communicator(Store& store, int rank, int size,
                                                const CommunicatorOptions& options);

// True in a build with the NCCL communicator (GRADSYNC_HAVE_NCCL).
bool nccl_compiled_in();

// The backends this build has, in comm.backend's order ("auto", "tcp", then "gloo", "mpi", "nccl"
// where compiled in): what `gradsync run --keys` lists.
std::vector<std::string> compiled_backends();

// The version of each communication library this build has, by backend ("gloo" "0.5.0", "mpi"
// "Open MPI v4.1.4", "nccl" "2.28.9"): what a result's provenance records.
std::vector<std::pair<std::string, std::string>> backend_library_versions();

}  // namespace gradsync
