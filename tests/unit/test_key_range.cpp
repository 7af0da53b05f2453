// How a worker cuts the flat buffer for the shards (server/key_range.cpp): balanced ranges,
// chunks of each range, and the order a request's pieces go out in. Pure functions, no sockets.
#include <doctest/doctest.h>

#include <utility>
#include <vector>

#include "common/error.h"
#include "common/wire_format.h"
#include "strategies/ps/ps_client.h"

using namespace gradsync;

TEST_CASE("ps client: balanced_ranges gives the first total % K shards one extra element") {
  for (std::uint64_t k : {1, 2, 3}) {
    for (std::uint64_t total :
         {std::uint64_t{0}, std::uint64_t{1}, k - 1, k + 1, std::uint64_t{1000003}}) {
      CAPTURE(k);
      CAPTURE(total);
      const auto ranges = balanced_ranges(total, static_cast<int>(k));
      REQUIRE(ranges.size() == k);
      std::uint64_t at = 0;
      for (std::uint64_t i = 0; i < k; ++i) {
        CHECK(ranges[i].begin == at);
        CHECK(ranges[i].size() == total / k + (i < total % k ? 1 : 0));
        at = ranges[i].end;
      }
      CHECK(at == total);
    }
  }
  CHECK(balanced_ranges(1000003, 3)[1] == KeyRange{333335, 666669});
  CHECK_THROWS_AS(balanced_ranges(10, 0), Error);
}

TEST_CASE(
    "ps client: send_order goes round the shards chunk by chunk, rank r starting at r mod K") {
  const KeyRange a0{0, 10}, a1{10, 20}, a2{20, 25}, b0{25, 35}, c0{35, 45}, c1{45, 50};
  const std::vector<std::vector<KeyRange>> pieces = {{a0, a1, a2}, {b0}, {c0, c1}};
  auto keys = [](const std::vector<ShardPiece>& order) {
    std::vector<std::pair<int, std::uint64_t>> out;
    for (const ShardPiece& p : order) out.emplace_back(p.shard, p.keys.begin);
    return out;
  };
  using Order = std::vector<std::pair<int, std::uint64_t>>;
  // Rank 0: chunk 0 of shards 0, 1, 2, then chunk 1 of those that have one, ...
  CHECK(keys(send_order(pieces, 0)) == Order{{0, 0}, {1, 25}, {2, 35}, {0, 10}, {2, 45}, {0, 20}});
  // Rank 4 of any world starts each round at shard 4 mod 3 = 1.
  CHECK(keys(send_order(pieces, 4)) == Order{{1, 25}, {2, 35}, {0, 0}, {2, 45}, {0, 10}, {0, 20}});
}

TEST_CASE("ps client: chunk_ranges tiles a shard's range in chunks of kChunkKeys from its start") {
  const std::uint64_t c = wire::kChunkKeys;
  CHECK(chunk_ranges({5, 5}) == std::vector<KeyRange>{{5, 5}});  // one empty chunk
  CHECK(chunk_ranges({7, 8}) == std::vector<KeyRange>{{7, 8}});
  CHECK(chunk_ranges({10, 10 + c}) == std::vector<KeyRange>{{10, 10 + c}});
  CHECK(chunk_ranges({10, 10 + 2 * c + 1}) ==
        std::vector<KeyRange>{{10, 10 + c}, {10 + c, 10 + 2 * c}, {10 + 2 * c, 10 + 2 * c + 1}});
}
