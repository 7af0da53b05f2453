// `dp`: DataParallel's single-server pattern, N replicas as N threads of one process.
//
// Every step: each replica computes its gradient; replica 0 gathers the other N-1 gradients
// and sums them into its own (receiving (N-1)*S bytes), averages, applies the optimizer, and
// copies the new parameters out to every other replica (sending (N-1)*S bytes). Replica 0 does
// all of that alone while the others wait: that serial, replica-0-bound traffic is exactly why
// DistributedDataParallel's all-reduce beats DataParallel, and what this strategy measures.
//
// Batch norm (the model's buffers(), attach_buffers): each replica normalises by its own chunk
// of the batch, and the running statistics kept are replica 0's, copied to the others with the
// parameters every step (and at init): in torch's DataParallel replica 0 shares the module's
// buffers, and each forward replicates them from it. Their bytes count in the traffic beside
// the parameters'. SyncBatchNorm does not run under DataParallel (torch's needs
// DistributedDataParallel): make_strategies refuses model.sync_batchnorm for dp.
//
// make_dp_group() returns the N per-replica strategies; each must be driven by its own thread.
// A replica that waits longer than `timeout` for the others throws TimeoutError naming them.
// With a `link` (network.link_gbps), replica 0's gather and copy-out pass through it as
// through a real server's NIC: (N-1)*S received, then (N-1)*S sent, one after the other.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "common/link.h"
#include "model/optimizer/sgd.h"
#include "strategies/sync_strategy.h"

namespace gradsync {

std::vector<std::unique_ptr<SyncStrategy>> make_dp_group(int replicas, const SgdOptions& sgd,
                                                         std::chrono::milliseconds timeout,
                                                         std::shared_ptr<Link> link = {});

}  // namespace gradsync
