// ParamStore: one shard's slice of the parameters and the Sgd that updates it, chunk by chunk.
//
//   ParamStore store(range.size(), sgd);
//   store.set(init_payload);                                   // INIT
//   store.apply_average(pushes, [&](Chunk c) { send(c); });    // sync: mean of N gradients
//   store.apply(push, [&](Chunk c) { send(c); });              // async / ssp: one gradient
//   Buffer reply = store.snapshot(chunk);                      // shares the array, no copy
//
// Updates run chunk by chunk (kChunkFloats, 1 MiB) and call `ready` after each, so the shard
// sends chunk i while it computes chunk i + 1, and the worker copies chunk i into place while
// chunk i + 1 is on the wire: the optimizer and the final copy hide behind the transfer.
//
// Replies send the parameters without copying them: snapshot() hands out a Buffer that shares
// the current array. An update writes in place when no snapshot of it is still held (the usual
// case in sync mode: every reply of step t has left before a push of step t+1 can arrive), and
// otherwise into another array first (copy-on-write), so bytes that ZeroMQ is still sending
// never change under it. Within one update, chunk i's snapshots are never written again.
// Snapshots may be released on any thread (ZeroMQ's I/O thread does); everything else is for
// the one thread that owns the store.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "server/message.h"
#include "worker/sgd.h"

namespace gradsync {

class ParamStore {
 public:
  static constexpr std::size_t kChunkFloats = std::size_t{1} << 18;  // 1 MiB of floats

  // A piece of the range, as offsets into it. An empty range has one empty chunk, so every
  // reply has at least one message.
  struct Chunk {
    std::size_t begin = 0;
    std::size_t end = 0;
  };
  using ChunkReady = std::function<void(Chunk)>;

  ParamStore(std::size_t size, const SgdOptions& sgd);

  // The initial parameters: size() floats as raw little-endian bytes.
  void set(std::span<const std::byte> floats);
  // One Sgd step with the average of `grads` (one gradient per worker, each size() floats).
  void apply_average(std::span<const Buffer> grads, const ChunkReady& ready);
  // One Sgd step with `grad` as it is.
  void apply(const Buffer& grad, const ChunkReady& ready);

  const std::vector<Chunk>& chunks() const { return chunks_; }
  Buffer snapshot(Chunk chunk) const;
  std::span<const float> values() const { return *current_; }
  std::size_t size() const { return size_; }
  // Updates that had to copy because a snapshot was still being sent (for tests and stats).
  std::uint64_t copies_on_write() const { return copies_; }

 private:
  std::span<float> writable();
  const float* floats_of(const Buffer& buffer);

  std::size_t size_;
  std::vector<Chunk> chunks_;
  std::shared_ptr<std::vector<float>> current_;
  // Arrays given up by earlier copy-on-writes; reused once ZeroMQ released them, so a busy
  // async shard does not allocate (and page-fault) a fresh array per update.
  std::vector<std::shared_ptr<std::vector<float>>> spares_;
  std::vector<Sgd> sgd_;        // one per chunk: Sgd is element-wise, so this is the same optimizer
  std::vector<float> average_;  // one chunk
  std::vector<std::vector<float>> unaligned_;
  std::uint64_t copies_ = 0;
};

}  // namespace gradsync
