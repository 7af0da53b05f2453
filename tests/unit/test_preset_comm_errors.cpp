// Preset errors in what the workers' communication is built from: network.slow_ranks and
// network.hosts, comm.compression, comm.hierarchical, comm.backend with comm.algorithm, and
// zero's stage. Each is refused in one line naming the file, the line and the key, with what
// would be valid (the general shapes, types and ranges: test_preset_errors.cpp).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "experiments/preset.h"
#include "tests/support/preset_text.h"

namespace gradsync {
namespace {

using testing::error_of;
using testing::load;

}  // namespace

TEST_CASE("preset: network.slow_ranks names workers of a run of processes, with their rate") {
  const std::string ps = "data: {kind: synthetic}\nstrategy: ps\nworkers: 3\n";
  CHECK_NOTHROW(load(ps + "network: {slow_ranks: [1], slow_link_gbps: 0.1}\n"));
  CHECK(load(ps + "network: {link_gbps: 1, slow_ranks: [0, 2], slow_link_gbps: 0.1}\n")
            .runs[0]
            .network.slow_ranks == std::vector<int>{0, 2});
  CHECK(load(ps, {"network.slow_ranks=1,2", "network.slow_link_gbps=0.5"})
            .runs[0]
            .network.slow_link_gbps == 0.5);
  CHECK(error_of(ps + "network: {slow_ranks: [1]}\n") ==
        "presets/x.yaml:4: network.slow_link_gbps: network.slow_ranks needs the slow ranks' link "
        "rate in Gbit/s, e.g. network.slow_link_gbps: 0.1");
  CHECK(error_of(ps + "network: {slow_link_gbps: 0.1}\n") ==
        "presets/x.yaml:4: network.slow_ranks: network.slow_link_gbps is set but no rank is slow: "
        "list the workers it applies to, e.g. network.slow_ranks: [1]");
  CHECK(error_of(ps + "network: {slow_ranks: [3], slow_link_gbps: 0.1}\n") ==
        "presets/x.yaml:4: network.slow_ranks: rank 3, but the run has 3 workers (ranks 0 to 2)");
  CHECK(error_of(ps + "network: {slow_ranks: [-1], slow_link_gbps: 0.1}\n")
            .starts_with("presets/x.yaml:4: network.slow_ranks: element 1: "));
  CHECK(error_of(ps + "network: {slow_ranks: [1], slow_link_gbps: 1e-9}\n")
            .starts_with("presets/x.yaml:4: network.slow_link_gbps: must be 0 or in [0.001, "));
  CHECK(error_of("data: {kind: synthetic}\nstrategy: dp\nworkers: 2\n"
                 "network: {slow_ranks: [1], slow_link_gbps: 0.1}\n") ==
        "presets/x.yaml:4: network.slow_ranks: dp runs its workers as threads of one process "
        "over one link: a slow rank needs a process of its own (allreduce, ps)");
  CHECK(error_of(ps + "network: {namespaces: true, slow_ranks: [1], slow_link_gbps: 0.1}\n")
            .starts_with("presets/x.yaml:4: network.slow_ranks: with network.namespaces the "
                         "kernel shapes every process at network.link_gbps"));
  const std::string ring = "data: {kind: synthetic}\nstrategy: allreduce\nworkers: 2\n";
  CHECK_NOTHROW(load(ring + "network: {slow_ranks: [1], slow_link_gbps: 0.1}\n"));
  CHECK(error_of(ring + "comm: {backend: gloo}\nnetwork: {slow_ranks: [1], slow_link_gbps: 1}\n") ==
        "presets/x.yaml:5: network.slow_ranks: gloo's transfers are not gradsync's to pace: slow "
        "ranks need comm.backend tcp (or auto on cpu)");
}

TEST_CASE("preset: network.hosts groups worker processes in namespaces") {
  const std::string ring = "data: {kind: synthetic}\nstrategy: allreduce\nworkers: 4\n";
  CHECK(load(ring + "network: {namespaces: true, hosts: 2}\n").runs[0].network.hosts == 2);
  CHECK_NOTHROW(
      load(ring + "ps: {servers: 2}\nnetwork: {namespaces: true, hosts: 4}\n", {"strategy=ps"}));
  CHECK(error_of(ring + "network: {hosts: 2}\n") ==
        "presets/x.yaml:4: network.hosts: hosts are simulated by network namespaces, one per "
        "host: it needs network.namespaces: true (and root)");
  CHECK(error_of(ring + "network: {namespaces: true, hosts: 5}\n") ==
        "presets/x.yaml:4: network.hosts: 5 hosts for 4 workers: each simulated host holds one "
        "worker at least");
  CHECK(error_of("data: {kind: synthetic}\nstrategy: dp\nworkers: 4\n"
                 "network: {namespaces: true, hosts: 2}\n") ==
        "presets/x.yaml:4: network.hosts: dp runs its workers as threads of one process: "
        "simulated hosts group worker processes (allreduce, ps)");
  // The /24 counts hosts, not workers, once they are grouped.
  CHECK_NOTHROW(
      load("data: {kind: synthetic}\nstrategy: allreduce\nworkers: 300\n"
           "network: {namespaces: true, hosts: 100}\n"));
  CHECK(error_of("data: {kind: synthetic}\nstrategy: allreduce\nworkers: 300\n"
                 "network: {namespaces: true, hosts: 250}\n") ==
        "presets/x.yaml:4: network.namespaces: one network of at most 249 processes, got 250 "
        "network.hosts (leave it false and use network.link_gbps alone)");
}

TEST_CASE("preset: comm.compression where it can run") {
  const std::string ring = "data: {kind: synthetic}\nstrategy: allreduce\nworkers: 4\n";
  CHECK_NOTHROW(load(ring + "comm: {compression: powersgd, powersgd_rank: 4}\n"));
  // ps compresses its pushes (its replies stay fp32), from host copies on a GPU too.
  const std::string ps = "data: {kind: synthetic}\nstrategy: ps\nworkers: 2\n";
  for (const std::string method : {"fp16", "bf16", "topk"}) {
    CHECK_NOTHROW(load(ps + "comm: {compression: " + method + "}\n"));
  }
  CHECK_NOTHROW(load(ps + "device: gpu\ncomm: {compression: fp16}\n"));
  CHECK(error_of(ps + "comm: {compression: powersgd}\n") ==
        "presets/x.yaml:4: comm.compression: powersgd needs an all-reduce of P and Q among the "
        "workers, which ps workers never do: ps pushes take fp16, bf16 or topk");
  // single and dp move no gradient over a wire.
  CHECK(
      error_of("data: {kind: synthetic}\nstrategy: dp\nworkers: 2\ncomm: {compression: fp16}\n") ==
      "presets/x.yaml:4: comm.compression: fp16: compression runs over the wire: allreduce, "
      "zero and ps; dp reduces in memory");
  CHECK(error_of("data: {kind: synthetic}\ncomm: {compression: topk}\n") ==
        "presets/x.yaml:2: comm.compression: topk: compression runs over the wire: allreduce, "
        "zero and ps; single has no wire (one worker)");
  const std::string zero = "data: {kind: synthetic}\nstrategy: zero\nworkers: 2\n";
  CHECK_NOTHROW(load(zero + "comm: {compression: bf16}\n"));
  CHECK(error_of(zero + "comm: {compression: powersgd}\n") ==
        "presets/x.yaml:4: comm.compression: powersgd approximates whole matrices, and zero "
        "reduce-scatters each unit's slices: zero takes fp16, bf16 or topk");
  CHECK(error_of(ring + "device: gpu\ncomm: {compression: topk}\n") ==
        "presets/x.yaml:5: comm.compression: topk encodes gradients in host memory: it needs "
        "device: cpu");
  CHECK(error_of(ring + "comm: {compression: bf16, uneven_inputs: true}\n") ==
        "presets/x.yaml:4: comm.compression: not with comm.uneven_inputs: Join averages over the "
        "ranks that trained, after the sum, and bf16 averages within its own reduction");
  CHECK(error_of(ring + "comm: {compression: zip}\n")
            .starts_with("presets/x.yaml:4: comm.compression: "));
  CHECK(error_of(ring + "comm: {topk_ratio: 0}\n")
            .starts_with("presets/x.yaml:4: comm.topk_ratio: "));
}

TEST_CASE("preset: comm.hierarchical on needs a backend between hosts") {
  const std::string ring = "data: {kind: synthetic}\nstrategy: allreduce\nworkers: 4\n";
  for (const char* backend : {"auto", "tcp", "gloo"}) {
    CHECK_NOTHROW(load(ring + "comm: {hierarchical: on, backend: " + backend + "}\n"));
  }
  for (const char* backend : {"shm", "mpi"}) {
    CHECK(error_of(ring + "comm: {hierarchical: on, backend: " + backend + "}\n") ==
          "presets/x.yaml:4: comm.hierarchical: on reduces within each host over shared memory "
          "and between hosts over tcp or gloo: it needs comm.backend auto, tcp or gloo, not " +
              std::string(backend));
  }
  CHECK(error_of(ring + "device: gpu\ncomm: {hierarchical: on, backend: nccl}\n") ==
        "presets/x.yaml:5: comm.hierarchical: on reduces within each host over shared memory and "
        "between hosts over tcp or gloo: it needs comm.backend auto, tcp or gloo, not nccl");
  CHECK(error_of(ring + "device: gpu\ncomm: {hierarchical: on}\n") ==
        "presets/x.yaml:5: comm.hierarchical: on reduces within each host over shared memory and "
        "between hosts over tcp or gloo: it needs comm.backend auto, tcp or gloo, not nccl (auto "
        "on device: gpu)");
  // Host-staged on a GPU, it reduces host buffers like any cpu run.
  CHECK_NOTHROW(load(ring + "device: gpu\ncomm: {hierarchical: on, backend: tcp}\n"));
  // off and auto take any backend; the comm keys are allreduce's, other strategies ignore them.
  CHECK_NOTHROW(load(ring + "comm: {hierarchical: off, backend: shm}\n"));
  CHECK_NOTHROW(load(ring + "comm: {hierarchical: auto, backend: mpi}\n"));
  CHECK_NOTHROW(
      load("data: {kind: synthetic}\nstrategy: ps\nworkers: 2\n"
           "comm: {hierarchical: on, backend: shm}\n"));
  // shm in namespaces stays refused for itself, before comm.hierarchical is looked at.
  CHECK(error_of(ring + "comm: {hierarchical: on, backend: shm}\nnetwork: {namespaces: true}\n")
            .starts_with("presets/x.yaml:5: network.namespaces: shm moves bytes through shared "
                         "memory"));
}

TEST_CASE("preset: choices list the valid values") {
  CHECK(error_of("data: {kind: synthetic}\nstrategy: ddp\n") ==
        "presets/x.yaml:2: strategy: unknown strategy 'ddp' (valid: single, dp, allreduce, zero, "
        "ps)");
  CHECK(error_of("data: {kind: mnist}\n") ==
        "presets/x.yaml:1: data.kind: unknown data.kind 'mnist' (valid: fashion-mnist, idx, "
        "synthetic)");
  CHECK(error_of("data: {kind: synthetic}\noutput:\n  progress: loud\n")
            .starts_with("presets/x.yaml:3: output.progress: unknown output.progress 'loud'"));
  CHECK(error_of("data: {kind: synthetic}\nruns:\n  - {strategy: dp}\n  - {strategy: ddp}\n")
            .starts_with("presets/x.yaml:4: strategy: unknown strategy 'ddp'"));
}

TEST_CASE("preset: comm.backend and comm.algorithm mean one thing whatever the backend") {
  const std::string ring = "strategy: allreduce\nworkers: 2\ndata: {kind: synthetic}\n";
  CHECK(error_of(ring + "comm: {backend: rdma}\n") ==
        "presets/x.yaml:4: comm.backend: unknown comm.backend 'rdma' (valid: auto, tcp, shm, "
        "gloo, mpi, nccl)");
  CHECK(error_of(ring + "comm: {algorithm: halving_doubling}\n") ==
        "presets/x.yaml:4: comm.algorithm: 'halving_doubling' is gloo's; tcp or nccl takes only "
        "default");
  CHECK(error_of(ring + "comm: {backend: tcp, algorithm: ring}\n") ==
        "presets/x.yaml:4: comm.algorithm: 'ring' is gloo's; tcp takes only default");
  CHECK(error_of(ring + "comm: {backend: nccl}\n") ==
        "presets/x.yaml:4: comm.backend: nccl reduces GPU buffers: it needs device: gpu");
  CHECK(error_of(ring + "comm: {backend: gloo}\nnetwork: {link_gbps: 1}\n")
            .starts_with("presets/x.yaml:5: network.link_gbps: gloo's sockets are not gradsync's "
                         "to pace"));
  // Shared memory has no link: emulation would be bypassed without a word.
  for (const char* network : {"{link_gbps: 1}", "{namespaces: true}"}) {
    CHECK(error_of(ring + "comm: {backend: shm}\nnetwork: " + network + "\n")
              .find("shm moves bytes through shared memory, which no emulated link paces") !=
          std::string::npos);
  }
  // mpirun starts the ranks outside any namespace: no link emulation with mpi at all.
  for (const char* network : {"{link_gbps: 1}", "{link_gbps: 1, namespaces: true}"}) {
    CHECK(error_of(ring + "comm: {backend: mpi}\nnetwork: " + network + "\n") ==
          "presets/x.yaml:5: network.link_gbps: mpi's sockets are not gradsync's to pace, and "
          "mpirun starts its ranks outside network namespaces: link emulation is for tcp and "
          "gloo");
  }
  CHECK(error_of(ring + "comm: {backend: mpi, algorithm: ring}\n") ==
        "presets/x.yaml:4: comm.algorithm: 'ring' is gloo's; mpi takes only default");
  // The keys are allreduce's: other strategies ignore them; gloo with its algorithms loads;
  // tcp, gloo and mpi on a GPU stage through host memory.
  CHECK_NOTHROW(load(ring + "device: gpu\ncomm: {backend: gloo}\n"));
  CHECK_NOTHROW(load(ring + "device: gpu\ncomm: {backend: mpi}\n"));
  CHECK_NOTHROW(load(ring + "device: gpu\ncomm: {backend: tcp}\n"));
  CHECK_NOTHROW(load("data: {kind: synthetic}\ncomm: {backend: nccl}\n"));
  CHECK_NOTHROW(load(ring + "comm: {backend: gloo, algorithm: ring_chunked}\n"));
  // Gloo's sync pairs: gloo's, with halving_doubling only (gloo_algorithms.h says why).
  CHECK_NOTHROW(load(ring + "comm: {backend: gloo, algorithm: halving_doubling, "
                            "gloo_pairs: sync}\n"));
  CHECK(error_of(ring + "comm: {backend: tcp, gloo_pairs: sync}\n") ==
        "presets/x.yaml:4: comm.gloo_pairs: 'sync' is for gloo's pairs; comm.backend is tcp");
  CHECK(error_of(ring + "comm: {backend: gloo, gloo_pairs: busy_poll}\n") ==
        "presets/x.yaml:4: comm.gloo_pairs: busy_poll pairs take comm.algorithm "
        "halving_doubling only (README, \"Backends\")");
}

TEST_CASE("preset: zero's stage and what zero runs on") {
  const std::string zero = "data: {kind: synthetic}\nstrategy: zero\nworkers: 2\n";
  CHECK_NOTHROW(load(zero + "zero: {stage: 2}\n"));
  CHECK(error_of(zero + "zero: {stage: 4}\n").starts_with("presets/x.yaml:4: zero.stage: "));
  CHECK(error_of(zero + "zero: {stage: 0}\n").starts_with("presets/x.yaml:4: zero.stage: "));
  CHECK_NOTHROW(load(zero + "zero: {stage: 3}\n"));  // the MLP runs on the layer storage
  CHECK(error_of(zero + "zero: {stage: 3}\nmodel: {kind: synthetic}\n") ==
        "presets/x.yaml:4: zero.stage: 3 gathers the parameters layer by layer, which "
        "model.kind synthetic does not offer (mlp does; use stage 1 or 2)");
  CHECK(error_of(zero + "zero: {stage: 3}\ncomm: {compression: fp16}\n")
            .starts_with("presets/x.yaml:5: comm.compression: zero stage 3 reduce-scatters"));
  CHECK(error_of(zero + "device: gpu\n") ==
        "presets/x.yaml:4: device: zero shards buffers in host memory in this version: use "
        "device: cpu");
  CHECK(error_of(zero + "comm: {uneven_inputs: true}\n") ==
        "presets/x.yaml:4: comm.uneven_inputs: Join is allreduce's: zero needs every rank in "
        "every step");
}

}  // namespace gradsync
