// Key ranges: which floats of the flat parameter buffer each parameter-server shard owns, the
// chunks a request carries, and the order in which a worker sends them. Shared by the shard
// (server/) and the worker's client (strategies/ps/), so it lives on the server's side.
#pragma once

#include <cstdint>
#include <vector>

namespace gradsync {

struct KeyRange {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint64_t size() const { return end - begin; }
  bool operator==(const KeyRange&) const = default;
};

// The K contiguous ranges of a buffer of `total` floats, balanced by bytes: the first
// total % K shards take one extra element.
std::vector<KeyRange> balanced_ranges(std::uint64_t total, int shards);

// The chunks of a shard's range that PUSHPULL and REPLY messages carry (wire::kChunkKeys keys
// each from range.begin, the last one shorter; an empty range is one empty chunk).
std::vector<KeyRange> chunk_ranges(KeyRange range);

// The order in which rank `rank` sends one request's pieces (pieces[k]: those for shard k, in
// key order): piece 0 of every shard, then piece 1, ..., each round starting at shard
// rank mod K. Every shard's link gets busy at once instead of the last shard waiting for all
// the others, and the N workers' chunks reach the shards spread out rather than all at the
// same shard at once.
struct ShardPiece {
  int shard = 0;
  KeyRange keys;
};
std::vector<ShardPiece> send_order(const std::vector<std::vector<KeyRange>>& pieces, int rank);

}  // namespace gradsync
