#include "server/key_range.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "common/wire_format.h"

namespace gradsync {

std::vector<KeyRange> balanced_ranges(std::uint64_t total, int shards) {
  if (shards < 1) {
    throw Error("balanced_ranges: " + std::to_string(shards) + " shards, need at least 1");
  }
  const auto k = static_cast<std::uint64_t>(shards);
  // Every shard gets total / K elements and the first total % K shards one more, so sizes
  // differ by at most one element (4 bytes) and the ranges tile [0, total) in shard order.
  // Shard i starts after i base-sized ranges plus one extra element for each earlier shard
  // that took one: min(i, extra) of them.
  const std::uint64_t base = total / k;
  const std::uint64_t extra = total % k;
  std::vector<KeyRange> ranges(k);
  for (std::uint64_t i = 0; i < k; ++i) {
    ranges[i].begin = i * base + (i < extra ? i : extra);
    ranges[i].end = ranges[i].begin + base + (i < extra ? 1 : 0);
  }
  return ranges;
}

std::vector<KeyRange> chunk_ranges(KeyRange range) {
  std::vector<KeyRange> chunks;
  // ceil(size / kChunkKeys) chunks, at least one, so even an empty range gets one message.
  for (std::uint64_t at = range.begin; at < range.end || chunks.empty(); at += wire::kChunkKeys) {
    chunks.push_back({at, std::min(range.end, at + wire::kChunkKeys)});
  }
  return chunks;
}

std::vector<ShardPiece> send_order(const std::vector<std::vector<KeyRange>>& pieces, int rank) {
  std::vector<ShardPiece> order;
  const std::size_t shards = pieces.size();
  std::size_t most = 0;
  for (const auto& p : pieces) most = std::max(most, p.size());
  for (std::size_t c = 0; c < most; ++c) {
    for (std::size_t j = 0; j < shards; ++j) {
      const std::size_t k = (j + static_cast<std::size_t>(rank)) % shards;
      if (c < pieces[k].size()) order.push_back({static_cast<int>(k), pieces[k][c]});
    }
  }
  return order;
}

}  // namespace gradsync
