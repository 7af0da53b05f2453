// The shard options the parameter-server unit tests start from: plain SGD (lr 0.1, no
// momentum), so expected parameters are easy to write down, and the timeout the test needs
// (short for ShardState on a fake clock, longer for real shards on threads).
#pragma once

#include <chrono>
#include <cstdint>

#include "server/shard_options.h"

namespace gradsync::testing {

inline PsShardOptions test_shard_options(int world, std::uint64_t model,
                                         PsShardOptions::Mode mode, int staleness,
                                         std::chrono::milliseconds timeout) {
  PsShardOptions o;
  o.world_size = world;
  o.model_size = model;
  o.mode = mode;
  o.staleness = staleness;
  o.sgd = {0.1, 0.0, 0.0};
  o.timeout = timeout;
  return o;
}

}  // namespace gradsync::testing
