// The CPU backends that run as threads of one process, for tests that run the same 16-bit and
// words collectives on each (tests/unit/test_half_allreduce.cpp, test_half_reduce_scatter.cpp):
// tcp, shm, gloo (where the build has it) and the hierarchical communicator over two groupings
// of ranks into hosts, every rank a thread over one InMemoryStore.
//
//   for (const Backend& backend : backends()) {
//     run_world(backend, 3, [&](Communicator& comm) { check_half_exact(comm, 4097); });
//   }
//
// The names live in their own namespace (gradsync::testing::half_backends): other tests keep
// helpers of the same names (blocks, hierarchical, shm_options) in their own files.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "allreduce/communicator.h"
#include "allreduce/gloo/gloo_communicator.h"
#include "allreduce/hierarchical/hierarchical_communicator.h"
#include "allreduce/hierarchical/host_layout.h"
#include "allreduce/in_memory_store.h"
#include "allreduce/shm/shm_communicator.h"
#include "allreduce/tcp/tcp_ring.h"
#include "tests/support/ring_ranks.h"
#include "tests/support/run_ranks.h"

namespace gradsync::testing::half_backends {

using namespace std::chrono_literals;
using gradsync::Communicator;

using Make = std::function<std::unique_ptr<Communicator>(gradsync::Store&, int rank, int size)>;

struct Backend {
  std::string name;
  Make make;
};

inline constexpr std::size_t kShmChunk = 4096;  // many chunk steps, both sets of slots

inline gradsync::ShmOptions shm_options(std::chrono::milliseconds timeout,
                                        const std::string& prefix, int machine_ranks = 0) {
  gradsync::ShmOptions options;
  options.timeout = timeout;
  options.chunk_bytes = kShmChunk;
  options.run_id = 0x4a1f0000ull;
  options.store_prefix = prefix;
  options.machine_ranks = machine_ranks;
  return options;
}

// As tests/unit/test_hierarchical_communicator.cpp builds it (make_communicator's levels): shm
// within each host, a TcpRing among the leaders, hosts from the ids given.
inline std::unique_ptr<Communicator> hierarchical(gradsync::Store& store,
                                                  const std::vector<std::string>& ids, int rank,
                                                  std::chrono::milliseconds timeout) {
  const gradsync::HostLayout layout = gradsync::host_layout(ids, rank);
  const std::string host = "hier/host" + std::to_string(layout.host);
  const int all = static_cast<int>(ids.size());
  gradsync::HierarchyLevels levels;
  levels.in_host = gradsync::make_shm_communicator(store, layout.local_rank, layout.local_size(),
                                                   shm_options(timeout, host, all));
  levels.from_leader =
      gradsync::make_shm_communicator(store, layout.local_rank, layout.local_size(),
                                      shm_options(3 * timeout, host + "/after", all));
  if (layout.leader() && layout.hosts > 1) {
    gradsync::TcpRingOptions ring = ring_options(2 * timeout);
    ring.store_prefix = "hier/leaders";
    levels.between_hosts = gradsync::make_tcp_ring(store, layout.host, layout.hosts, ring);
  }
  return gradsync::make_hierarchical_communicator(rank, layout, levels);
}

// Host ids: blocks of `per_host` ranks (the last host may have fewer: irregular), or ranks
// alternating between two hosts (irregular from 3 ranks on).
inline std::vector<std::string> blocks(int n, int per_host) {
  std::vector<std::string> ids;
  for (int r = 0; r < n; ++r) ids.push_back("host" + std::to_string(r / per_host));
  return ids;
}
inline std::vector<std::string> interleaved(int n) {
  std::vector<std::string> ids;
  for (int r = 0; r < n; ++r) ids.push_back(r % 2 == 0 ? "even" : "odd");
  return ids;
}

inline std::vector<Backend> backends(std::chrono::milliseconds timeout = 10s) {
  std::vector<Backend> all;
  all.push_back({"tcp", [=](gradsync::Store& store, int r, int n) {
                   return gradsync::make_tcp_ring(store, r, n, ring_options(timeout));
                 }});
  all.push_back({"shm", [=](gradsync::Store& store, int r, int n) {
                   return gradsync::make_shm_communicator(store, r, n, shm_options(timeout, "shm"));
                 }});
  if (gradsync::gloo_compiled_in()) {
    all.push_back({"gloo", [=](gradsync::Store& store, int r, int n) {
                     gradsync::GlooOptions options;
                     options.timeout = timeout;
                     return gradsync::make_gloo_communicator(store, r, n, options);
                   }});
  }
  all.push_back({"hierarchical, hosts of 2", [=](gradsync::Store& store, int r, int n) {
                   return hierarchical(store, blocks(n, 2), r, timeout);
                 }});
  all.push_back({"hierarchical, interleaved", [=](gradsync::Store& store, int r, int n) {
                   return hierarchical(store, interleaved(n), r, timeout);
                 }});
  return all;
}

// Runs body(comm) on every rank of a fresh world of n ranks of `backend`.
inline void run_world(const Backend& backend, int n,
                      const std::function<void(Communicator&)>& body) {
  gradsync::InMemoryStore store;
  run_ranks(n, [&](int r) {
    const auto comm = backend.make(store, r, n);
    body(*comm);
  });
}

}  // namespace gradsync::testing::half_backends
