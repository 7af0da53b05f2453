// ShardLayout: how ZeRO splits the flat parameter buffer among N ranks, as FSDP shards each
// wrapped unit's flat parameter: the buffer is cut into units of whole tensors (about
// `unit_bytes` each, built from the end, so the last layers' unit is the first backward
// finishes, as DDP's buckets are), each unit padded to a multiple of N and split into N equal
// slices; rank r owns slice r of every unit. A unit's reduce-scatter and all-gather are then
// one collective each with equal blocks, issued the moment backward has filled it.
//
//   ShardLayout layout = shard_layout(model.tensors(), model.param_count(), 4, 1 << 20, 2);
//   for (const ShardUnit& u : layout.units) ...   // in backward's order: highest offsets first
//   layout.shard_floats                            // this rank's floats, padding included
//
// Pure: no I/O, any thread.
#pragma once

#include <cstddef>
#include <vector>

#include "model/model.h"

namespace gradsync {

struct ShardUnit {
  std::size_t begin = 0, end = 0;  // [begin, end) of the flat buffer
  std::size_t slice = 0;           // floats per rank: ceil((end - begin) / N)
  std::size_t shard_offset = 0;    // where this rank's slice sits in its shard buffers
  std::size_t floats() const { return end - begin; }
  std::size_t padded() const;  // slice * N
  // [first, last) of the flat buffer that rank r's slice covers (empty past the end).
  std::size_t slice_begin(int rank) const;
  std::size_t slice_end(int rank) const;
  int ranks = 1;
};

struct ShardLayout {
  int ranks = 1;
  int rank = 0;
  std::vector<ShardUnit> units;  // highest offsets first
  std::size_t shard_floats = 0;  // sum of the slices
  std::size_t largest_padded = 0;
};

// `tensors` cover [0, params) in order (Model::tensors()); units hold whole tensors, closed at
// the tensor that brings them to `unit_bytes` or more. Throws gradsync::Error when the tensors do
// not cover the buffer.
ShardLayout shard_layout(const std::vector<TensorShape>& tensors, std::size_t params, int ranks,
                         std::size_t unit_bytes, int rank);

}  // namespace gradsync
