// What a GlooCommunicator is made with (gloo_communicator.h): its own header, since the
// rendezvous (gloo_mesh.h) and the failures (gloo_failures.h) read it too, and
// gloo_communicator.cpp includes them.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace gradsync {

struct GlooOptions {
  std::chrono::milliseconds timeout{60000};  // every collective, and joining
  std::string algorithm = "ring";            // allreduce: ring | ring_chunked | halving_doubling
  std::string bind_host = "127.0.0.1";       // the address of this rank's Gloo TCP device
  std::string store_prefix = "gloo";         // several communicators can share one Store
  // The header exchange before each collective that turns mismatched collectives into a desync
  // error on every rank (gloo_communicator.h); the same on every rank. Costs one round of 32-byte
  // messages per collective: ~0.1-0.15 ms on the 2-vCPU VM with 2 ranks (a 0-element collective),
  // inside the noise of a 4 MiB allreduce (allreduce/README.md has the figures). Off, mismatched
  // ranks time out, or end the process under ring_chunked and halving_doubling.
  bool check_desync = true;
  // The pairs the float allreduce runs on (comm.gloo_pairs): async, Gloo's default, where its
  // event-loop thread reads every socket and hands each message to the waiting thread; sync
  // (Gloo's setSync, its benchmark's --sync), where the thread that runs the allreduce reads its
  // own sockets; busy_poll, sync that spins on the socket instead of sleeping in recv. sync and
  // busy_poll take halving_doubling only (gloo_algorithms.h says why); every other collective
  // stays on async pairs.
  std::string pairs = "async";
  // Sync pairs: the most bytes one halving_doubling call reduces. 0: what this host's kernel
  // always buffers (net.core.wmem_max, up to Gloo's 32 MiB); a value above that may block both
  // ranks of a pair until the timeout. The ranks take the smallest of theirs.
  std::size_t sync_piece_bytes = 0;
};

}  // namespace gradsync
