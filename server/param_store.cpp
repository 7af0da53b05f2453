#include "server/param_store.h"

#include <atomic>
#include <cstring>

#include "common/error.h"

namespace gradsync {
namespace {
constexpr std::size_t kMaxSpares = 4;  // more would only hold memory: one per reply in flight
}  // namespace

ParamStore::ParamStore(std::size_t size, const SgdOptions& sgd)
    : size_(size), current_(std::make_shared<std::vector<float>>(size, 0.f)) {
  // ceil(size / kChunkFloats) chunks of kChunkFloats, the last one shorter; at least one. The
  // same tiling as chunk_ranges() on the worker's side: the wire format fixes it.
  for (std::size_t begin = 0; begin < size || chunks_.empty(); begin += kChunkFloats) {
    chunks_.push_back({begin, std::min(size, begin + kChunkFloats)});
    sgd_.emplace_back(chunks_.back().size(), sgd);
  }
  fresh_holds();
}

void ParamStore::fresh_holds() {
  holds_.clear();
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    holds_.push_back(std::make_shared<const Hold>(Hold{current_}));
  }
}

void ParamStore::set(std::span<const std::byte> floats) {
  GRADSYNC_CHECK(floats.size() == size_ * sizeof(float), "INIT payload does not match the range");
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const Chunk chunk = chunks_[c];
    std::memcpy(writable(c).data() + chunk.begin, floats.data() + chunk.begin * sizeof(float),
                chunk.size() * sizeof(float));
  }
}

void ParamStore::restore(std::span<const float> params, std::span<const float> momentum,
                         std::uint64_t optimizer_steps) {
  GRADSYNC_CHECK(params.size() == size_ && momentum.size() == size_,
                 "checkpoint state does not match the range");
  set(std::as_bytes(params));
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    sgd_[c].load_state(momentum.subspan(chunks_[c].begin, chunks_[c].size()), optimizer_steps);
  }
}

std::uint64_t ParamStore::save_optimizer(std::span<float> momentum) const {
  GRADSYNC_CHECK(momentum.size() == size_, "momentum buffer does not match the range");
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    sgd_[c].save_state(momentum.subspan(chunks_[c].begin, chunks_[c].size()));
  }
  return sgd_.front().steps_taken();
}

Buffer ParamStore::snapshot(Chunk chunk) const {
  // The chunk's Hold is the owner: while ZeroMQ has it, writable() sees the chunk as held.
  std::size_t c = chunk.begin / kChunkFloats;
  GRADSYNC_CHECK(
      c < chunks_.size() && chunks_[c].begin == chunk.begin && chunks_[c].end == chunk.end,
      "a snapshot must be of one of the store's chunks");
  const std::span<const float> all(*current_);
  return {std::as_bytes(all.subspan(chunk.begin, chunk.size())), holds_[c]};
}

std::span<float> ParamStore::writable(std::size_t c) {
  // use_count() == 1: no reply holds chunk c of this array any more. The last holder released
  // it with an acq_rel decrement (possibly on ZeroMQ's I/O thread, after its last read); the
  // acquire fence orders our writes after those reads. Other chunks may be held: their bytes
  // are not written.
  if (holds_[c].use_count() == 1) {
    std::atomic_thread_fence(std::memory_order_acquire);
    return *current_;
  }
  std::shared_ptr<std::vector<float>> next;
  for (auto& spare : spares_) {
    // A spare is free once every Hold of it is gone: then spares_ holds its only reference.
    if (spare && spare.use_count() == 1) {
      std::atomic_thread_fence(std::memory_order_acquire);
      next = std::move(spare);
      break;
    }
  }
  std::erase(spares_, nullptr);
  if (!next) next = std::make_shared<std::vector<float>>(size_);
  std::memcpy(next->data(), current_->data(), size_ * sizeof(float));
  if (spares_.size() < kMaxSpares) spares_.push_back(current_);
  current_ = std::move(next);
  // The snapshots out there keep their Holds, and with them the old array; the new array starts
  // with no chunk held.
  fresh_holds();
  ++copies_;
  return *current_;
}

const float* ParamStore::floats_of(const Buffer& buffer, std::size_t n) {
  GRADSYNC_CHECK(buffer.size() == n * sizeof(float), "gradient does not match the chunk");
  // ZeroMQ's frames start at malloc alignment plus its header, always a multiple of 4 on the
  // platforms we know; the copy is a guard for any other, not a path we expect to take.
  const auto address = reinterpret_cast<std::uintptr_t>(buffer.bytes.data());
  if (address % alignof(float) == 0) return reinterpret_cast<const float*>(buffer.bytes.data());
  unaligned_.emplace_back(n);
  std::memcpy(unaligned_.back().data(), buffer.bytes.data(), buffer.size());
  return unaligned_.back().data();
}

void ParamStore::apply(std::size_t c, std::span<const Buffer> grads) {
  GRADSYNC_CHECK(c < chunks_.size(), "no such chunk");
  GRADSYNC_CHECK(!grads.empty(), "an average of no gradients");
  ++applies_;
  const auto [begin, end] = chunks_[c];
  const std::size_t n = end - begin;
  std::vector<const float*> g;
  g.reserve(grads.size());
  for (const Buffer& grad : grads) g.push_back(floats_of(grad, n));
  const std::span<float> params = writable(c);
  std::span<const float> mean(g[0], n);  // the mean of one gradient is itself
  if (grads.size() > 1) {
    // Summed in the order given, then multiplied by 1/N, as the dp strategy does.
    const float inv = 1.0f / static_cast<float>(grads.size());
    average_.resize(n);
    float* sum = average_.data();
    std::memcpy(sum, g[0], n * sizeof(float));
    for (std::size_t r = 1; r + 1 < g.size(); ++r) {
      for (std::size_t i = 0; i < n; ++i) sum[i] += g[r][i];
    }
    // The last pass also scales: the same two roundings as a separate pass, one read fewer.
    const float* last = g.back();
    for (std::size_t i = 0; i < n; ++i) sum[i] = (sum[i] + last[i]) * inv;
    mean = std::span<const float>(sum, n);
  }
  sgd_[c].step(params.subspan(begin, n), mean);
  unaligned_.clear();
}

}  // namespace gradsync
