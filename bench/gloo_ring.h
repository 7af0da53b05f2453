// The Gloo side of `gradsync bench allreduce`: the same sweep, with the same timing rules and
// the same plug-ins' data and expectations (bench/collective_ops.h), run on Gloo
// instead of TcpRing. Built only when Debian's libgloo-dev is present (GRADSYNC_HAVE_GLOO);
// nothing else includes this header in a build without it.
//
//   auto rows = gloo_measure(spec);   // nullopt: Gloo cannot run this configuration
//
// Setup per rank thread, as a process of a real job would do it: its own
// gloo::transport::tcp device on 127.0.0.1 (its own event loop thread), a
// gloo::rendezvous::Context connected as a full mesh through one in-process
// gloo::rendezvous::HashStore. Collectives are the ones PyTorch's Gloo backend calls for dense
// CPU tensors:
//   allreduce  gloo::allreduce, ring (reduce-scatter then all-gather, segments pipelined)
//   broadcast  gloo::broadcast, binomial tree from the root
//   allgather  gloo::allgather, ring
// Each call gets a fresh tag, as c10d does, so that no message can match another call's.
//
// Blocking and failures: as measure_sweep; every Gloo wait uses spec.timeout, and Gloo's
// exceptions are rethrown as gradsync::PeerError naming the rank, endpoint and operation.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "allreduce/gloo/gloo_communicator.h"  // gloo_version()
#include "bench/collective_sweep.h"

namespace gradsync {

// One line on which Gloo algorithm runs `op`, for the table's header.
std::string gloo_algorithm(const std::string& op);

// The sweep on Gloo; nullopt when Gloo has no counterpart for spec.op or spec.ranks < 2 (Gloo's
// ring needs a peer: with one rank it has no pair to send to).
std::optional<std::vector<SizeResult>> gloo_measure(const SweepSpec& spec);

}  // namespace gradsync
