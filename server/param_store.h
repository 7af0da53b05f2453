// ParamStore: one shard's slice of the parameters and the Sgd that updates it, chunk by chunk.
//
//   ParamStore store(range.size(), sgd);
//   store.set(init_payload);                         // INIT
//   store.apply(c, pushes);   // chunk c: one Sgd step with the mean of the pushes (one per worker)
//   Buffer reply = store.snapshot(store.chunks()[c]);   // shares the array, no copy
//
// The range is cut into chunks of wire::kChunkKeys (512 KiB of floats), the unit of PUSHPULL and
// REPLY messages. Each update is of one chunk, so a sync shard updates and answers chunk c as
// soon as every worker pushed it, while chunk c + 1 is still on the wire, and an async shard
// applies each chunk of a push as it arrives.
//
// Replies send the parameters without copying them: snapshot() hands out a Buffer that shares
// the current array and marks its chunk as held. An update of chunk c writes in place when no
// snapshot of chunk c is still held (the usual case in sync mode: every reply of chunk c of
// step t has left before any worker can push chunk c of step t + 1), even while other chunks'
// snapshots are being sent (their bytes are not touched); otherwise it writes into a copy of
// the whole array first (copy-on-write), so bytes that ZeroMQ is still sending never change
// under it, and the copy starts with no chunk held. Snapshots may be released on any thread
// (ZeroMQ's I/O thread does); everything else is for the one thread that owns the store.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/optimizer/sgd.h"
#include "server/message.h"

namespace gradsync {

class ParamStore {
 public:
  static constexpr std::size_t kChunkFloats = wire::kChunkKeys;

  // A piece of the range, as offsets into it. An empty range has one empty chunk, so every
  // reply has at least one message.
  struct Chunk {
    std::size_t begin = 0;
    std::size_t end = 0;
    std::size_t size() const { return end - begin; }
  };

  ParamStore(std::size_t size, const SgdOptions& sgd);

  // The initial parameters: size() floats as raw little-endian bytes.
  void set(std::span<const std::byte> floats);
  // One Sgd step on chunk `c` with the mean of `grads` (one per worker, each the chunk's floats
  // as raw bytes), summed in the order given (rank order: the result must not depend on which
  // push arrived first) and then scaled by 1/N, as the dp strategy does, so a sync parameter
  // server and dp compute bit-identical averages from the same gradients.
  void apply(std::size_t c, std::span<const Buffer> grads);

  // Checkpoints: the range's parameters and its optimizer state (each chunk's Sgd, laid end to
  // end), restored on resume, saved with the number of updates each chunk has taken (in sync
  // mode every chunk takes one per step).
  void restore(std::span<const float> params, std::span<const float> momentum,
               std::uint64_t optimizer_steps);
  std::uint64_t save_optimizer(std::span<float> momentum) const;

  const std::vector<Chunk>& chunks() const { return chunks_; }
  Buffer snapshot(Chunk chunk) const;
  std::span<const float> values() const { return *current_; }
  std::size_t size() const { return size_; }
  // Updates that had to copy because a snapshot was still being sent (for tests and stats).
  std::uint64_t copies_on_write() const { return copies_; }
  // apply() calls so far (the trace's "apply" spans are the calls that raised it).
  std::uint64_t applies() const { return applies_; }

 private:
  // What a snapshot of one chunk owns: the array (kept alive) and, by being shared, the mark
  // that the chunk is held (use_count() > 1).
  struct Hold {
    std::shared_ptr<std::vector<float>> array;
  };

  std::span<float> writable(std::size_t c);
  void fresh_holds();
  const float* floats_of(const Buffer& buffer, std::size_t n);

  std::size_t size_;
  std::vector<Chunk> chunks_;
  std::shared_ptr<std::vector<float>> current_;
  std::vector<std::shared_ptr<const Hold>> holds_;  // per chunk, all on current_
  // Arrays given up by earlier copy-on-writes; reused once ZeroMQ released them, so a busy
  // async shard does not allocate (and page-fault) a fresh array per update.
  std::vector<std::shared_ptr<std::vector<float>>> spares_;
  std::vector<Sgd> sgd_;        // one per chunk: Sgd is element-wise, so this is the same optimizer
  std::vector<float> average_;  // one chunk
  std::vector<std::vector<float>> unaligned_;
  std::uint64_t copies_ = 0;
  std::uint64_t applies_ = 0;
};

}  // namespace gradsync
