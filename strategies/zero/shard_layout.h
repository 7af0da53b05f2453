// ShardLayout: how ZeRO splits the flat parameter buffer among N ranks, as FSDP shards each
// wrapped unit's flat parameter: the buffer is cut into units of whole tensors (about
// `unit_bytes` each, built from the end, so the last layers' unit is the first backward
// finishes, as DDP's buckets are), and each unit's first N floor(n / N) floats into N equal
// slices, rank r owning slice r; the tail (under N floats) is every rank's. A unit's
// reduce-scatter and all-gather then work on the model's own buffers, no padded copy: one
// collective each over the slices, and a tiny all-reduce of the tail.
//
//   ShardLayout layout = shard_layout(model.tensors(), model.param_count(), 4, 1 << 20, 2);
//   for (const ShardUnit& u : layout.units) ...   // in backward's order: highest offsets first
//   layout.shard_floats                            // this rank's floats: slices and tails
//
// Pure: no I/O, any thread.
#pragma once

#include <cstddef>
#include <vector>

#include "model/model.h"

namespace gradsync {

struct ShardUnit {
  std::size_t begin = 0, end = 0;  // [begin, end) of the flat buffer
  std::size_t slice = 0;           // floats per rank: floor((end - begin) / N)
  std::size_t shard_offset = 0;    // this rank's slice, then the tail, in its shard buffers
  int ranks = 1;
  std::size_t floats() const { return end - begin; }
  std::size_t sliced() const { return slice * static_cast<std::size_t>(ranks); }
  std::size_t tail_begin() const { return begin + sliced(); }
  std::size_t tail() const { return end - tail_begin(); }  // under N floats, on every rank
  // [first, last) of the flat buffer that rank r's slice covers.
  std::size_t slice_begin(int rank) const { return begin + slice * std::size_t(rank); }
  std::size_t slice_end(int rank) const { return slice_begin(rank) + slice; }
};

struct ShardLayout {
  int ranks = 1;
  int rank = 0;
  std::vector<ShardUnit> units;  // highest offsets first
  std::size_t shard_floats = 0;  // sum of the slices and tails
};

// `tensors` cover [0, params) in order (Model::tensors()); units hold whole tensors, closed at
// the tensor that brings them to `unit_bytes` or more. Throws gradsync::Error when the tensors do
// not cover the buffer.
ShardLayout shard_layout(const std::vector<TensorShape>& tensors, std::size_t params, int ranks,
                         std::size_t unit_bytes, int rank);

}  // namespace gradsync
