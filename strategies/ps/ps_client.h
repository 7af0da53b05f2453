// PsClient: a worker's connection to the K parameter-server shards (ps-lite's KVWorker).
//
//   PsClient client(options);                  // connects to every shard, HELLO handshake
//   client.wait(rank == 0 ? client.init(params) : client.pull(params));   // all start equal
//   auto t = client.push_pull(step, grads, params);   // to all shards at once; returns at once
//   client.wait(t);                            // params now hold every shard's reply
//
// Rank 0 sends the initial parameters (init); the shards hold every other rank's pull or
// push_pull until rank 0's INIT has arrived, and every request (INIT included) until every
// worker has said HELLO (their start gate), so the other ranks may pull at once. A client's
// first request therefore waits up to twice the timeout (the gate, then the answer), later
// ones the timeout, each plus 1 s (the shards' own verdict comes first).
//
// Each shard owns a contiguous key range of the flat parameter buffer (balanced_ranges();
// ranges() after the handshake). push_pull sends each shard its gradient range as one PUSHPULL
// per 512 KiB chunk (chunk_ranges(); round-robin over the shards), from the caller's buffer
// without a copy when it is large (or, under options.compression, each chunk encoded in fp16,
// bf16 or top-k with error feedback: push_encoder.h), and copies each shard's reply into `params`
// (with non-temporal stores when the model outgrows the cache: reply_copy.h). A shard replies chunk
// by chunk, in order, each chunk as soon as its optimizer has updated it — in sync mode as soon as
// every worker pushed that chunk — so pushing later chunks overlaps updating and returning earlier
// ones (BytePS's pipelining), and the copy of one reply chunk overlaps the transfer of the next.
// wait() returns once every chunk of every shard arrived.
//
// Link emulation (options.link, network.link_gbps): payload bytes sent and received are each
// paced at the link's rate, independently (full duplex): push_pull queues its chunks, and
// wait() releases each one when the link would have carried it, while it also receives the
// replies and files each one when the link would have delivered it. Only wait() moves queued
// chunks: call it soon after push_pull (PsStrategy does at once). Heartbeats are not shaped.
//
// Buffers: the spans must stay valid and untouched until wait() returns. If wait() throws, or
// the client is destroyed with requests outstanding, ZeroMQ has released every span before that
// returns. Tickets: requests to one shard are answered in order; several may be outstanding,
// and wait(t) also completes every earlier ticket. Threads: heartbeats go out from a background
// thread, on their own sockets, every `heartbeat`; otherwise not thread-safe (one caller
// thread). The destructor says BYE to every shard, waiting at most 1 s for it to leave.
//
// Failures: a shard that refuses the handshake (model size, world size, rank, wire version)
// fails the constructor with PeerError and the shard's reason; a shard that does not answer the
// handshake within `timeout` (not running, or a CURVE key that does not match: both look the
// same to ZeroMQ) throws TimeoutError; a reply that does not arrive within `timeout` + 1 s of
// wait() throws TimeoutError naming the shard and its endpoint (the extra second lets a shard
// that timed the same wait say first whom it waits for); an ERROR from a shard throws PeerError
// with its reason (e.g. "worker 2 (last seen 10.2 s ago) stopped sending: ending the run").
// PeerError::rank() is then the shard's index. After any failure the client is closed: every
// later call throws.
//
// Staleness (PushPullStats::max_staleness, the REPLY's aux) is counted in steps, as in SSP
// (Ho et al., 2013): parameters of clock c hold every worker's updates for steps < c; a push of
// step t computed on parameters of clock c has staleness t - c. Sync: always 0. SSP with bound
// s: never more than s. Async: how far the worker ran ahead of the slowest worker.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/link.h"
#include "common/stopwatch.h"
#include "server/curve_keys.h"
#include "server/key_range.h"
#include "strategies/ps/push_encoder.h"

namespace gradsync {

struct PsClientOptions {
  int rank = 0;
  int world_size = 1;
  std::uint64_t model_size = 0;               // floats
  std::vector<std::string> endpoints;         // one per shard, "tcp://127.0.0.1:5555"
  std::chrono::milliseconds timeout{60000};   // handshake, and each wait()
  std::chrono::milliseconds heartbeat{1000};  // zero: no heartbeats (tests of a silent worker)
  std::optional<CurveKeys> curve;             // the shared key pair (with its secret); absent: none
  // The worker's emulated NIC (network.link_gbps): payload bytes sent and received are each
  // capped at its rate, full duplex. Null: no cap.
  std::shared_ptr<Link> link;
  // The run's id (common/run_id.h), in the HELLO and every heartbeat: a shard of another run
  // refuses them. 0 only where no shard checks (tests, benchmarks).
  std::uint64_t run_id = 0;
  // Reach a shard given on loopback through its ipc address (server/local_endpoint.h); the
  // shard must listen there (PsShardOptions::bind_ipc). Errors still name `endpoints`.
  bool same_host_ipc = false;
  // comm.compression on pushes (push_encoder.h): none, fp16, bf16 or topk; the replies stay
  // fp32. Anything else fails the constructor with gradsync::Error.
  PushCompression compression{};
};

struct PushPullStats {
  std::uint64_t bytes_sent = 0;      // headers and payloads (as encoded), over every shard
  std::uint64_t bytes_received = 0;  // the same for the replies (one header per chunk)
  std::uint32_t max_staleness = 0;   // over the shards' replies: steps the params lag behind
  // For the trace: when the request was issued, and per shard when its last reply was filed.
  Clock::time_point issued{};
  std::vector<Clock::time_point> answered;
};

class PsClient {
 public:
  explicit PsClient(const PsClientOptions& options);
  ~PsClient();
  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

  const std::vector<KeyRange>& ranges() const;

  using Ticket = std::uint64_t;
  // Rank 0 only: sends params[range] to each shard as the initial parameters. The shards'
  // replies carry no parameters; params may be reused once wait() returned.
  Ticket init(std::span<const float> params);
  // Sends grads[range] to each shard for `step`; replies land in params[range].
  Ticket push_pull(std::uint64_t step, std::span<const float> grads, std::span<float> params);
  // Asks every shard for its current parameters.
  Ticket pull(std::span<float> params);
  // Blocks until every shard answered the ticket's request; returns its traffic and staleness.
  PushPullStats wait(Ticket ticket);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradsync
