// BufferPool (strategies/zero/layer_shards.h): where ZeRO stages 2 and 3 get their layer-sized
// buffers. A freed block of a size comes back for the next take of that size, and the blocks in
// use and spare together never pass the budget (the shards' peak), the smallest spares going
// first.
#include <doctest/doctest.h>

#include "strategies/zero/layer_shards.h"

using gradsync::BufferPool;

TEST_CASE("buffer pool: a freed block is taken again by the next layer of its size") {
  BufferPool pool(1000);
  BufferPool::Block a = pool.take(300);
  float* const where = a.get();
  pool.give(300, std::move(a));
  BufferPool::Block other = pool.take(200);  // another size: a new block
  CHECK(other.get() != where);
  BufferPool::Block again = pool.take(300);
  CHECK(again.get() == where);
  CHECK(pool.in_use_floats() == 500);
  CHECK(pool.spare_floats() == 0);
  pool.give(200, std::move(other));
  pool.give(300, std::move(again));
  pool.give(300, BufferPool::Block());  // nothing to give back: no effect
  CHECK(pool.in_use_floats() == 0);
  CHECK(pool.spare_floats() == 500);
  CHECK(pool.take(300).get() == where);
}

TEST_CASE("buffer pool: in use and spare stay within the budget, the smallest spares leave first") {
  BufferPool pool(1000);
  BufferPool::Block a = pool.take(500);
  BufferPool::Block b = pool.take(300);
  BufferPool::Block c = pool.take(100);
  float* const b_at = b.get();
  pool.give(100, std::move(c));
  pool.give(300, std::move(b));
  CHECK(pool.in_use_floats() == 500);
  CHECK(pool.spare_floats() == 400);
  // A new size that does not fit beside every spare: the 100 leaves, the 300 stays.
  BufferPool::Block d = pool.take(200);
  CHECK(pool.in_use_floats() == 700);
  CHECK(pool.spare_floats() == 300);
  CHECK(pool.take(300).get() == b_at);
  CHECK(pool.spare_floats() == 0);
  // Freeing within the budget keeps everything; past it, nothing is kept beyond the budget.
  pool.give(500, std::move(a));
  CHECK(pool.in_use_floats() + pool.spare_floats() <= 1000);
  pool.give(200, std::move(d));
  CHECK(pool.in_use_floats() + pool.spare_floats() <= 1000);
  CHECK(pool.spare_floats() == 700);
}
