#include "strategies/zero/shard_layout.h"

#include <algorithm>

#include "common/error.h"

namespace gradsync {

ShardLayout shard_layout(const std::vector<TensorShape>& tensors, std::size_t params, int ranks,
                         std::size_t unit_bytes, int rank) {
  GRADSYNC_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "shard layout: rank out of range");
  std::size_t covered = 0;
  for (const TensorShape& t : tensors) {
    GRADSYNC_CHECK(t.offset == covered, "shard layout: the tensors must cover the buffer in order");
    covered = t.end();
  }
  GRADSYNC_CHECK(covered == params, "shard layout: the tensors must cover the buffer");
  ShardLayout layout;
  layout.ranks = ranks;
  layout.rank = rank;
  std::size_t end = params;
  for (auto t = tensors.rbegin(); t != tensors.rend(); ++t) {
    const bool last = std::next(t) == tensors.rend();
    if (!last && (end - t->offset) * sizeof(float) < unit_bytes) continue;
    ShardUnit unit;
    unit.ranks = ranks;
    unit.begin = t->offset;
    unit.end = end;
    unit.slice = unit.floats() / std::size_t(ranks);
    unit.shard_offset = layout.shard_floats;
    layout.shard_floats += unit.slice + unit.tail();
    if (unit.floats() > 0) layout.units.push_back(unit);
    end = t->offset;
  }
  return layout;
}

}  // namespace gradsync
