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
  // ceil(size / kChunkFloats) chunks of kChunkFloats, the last one shorter; at least one.
  for (std::size_t begin = 0; begin < size || chunks_.empty(); begin += kChunkFloats) {
    chunks_.push_back({begin, std::min(size, begin + kChunkFloats)});
    sgd_.emplace_back(chunks_.back().end - begin, sgd);
  }
}

void ParamStore::set(std::span<const std::byte> floats) {
  GRADSYNC_CHECK(floats.size() == size_ * sizeof(float), "INIT payload does not match the range");
  std::memcpy(writable().data(), floats.data(), floats.size());
}

Buffer ParamStore::snapshot(Chunk chunk) const {
  const std::span<const float> all(*current_);
  return {std::as_bytes(all.subspan(chunk.begin, chunk.end - chunk.begin)), current_};
}

std::span<float> ParamStore::writable() {
  // use_count() == 1: no reply holds this array any more. The last holder released it with an
  // acq_rel decrement (possibly on ZeroMQ's I/O thread, after its last read); the acquire fence
  // orders our writes after those reads.
  if (current_.use_count() == 1) {
    std::atomic_thread_fence(std::memory_order_acquire);
    return *current_;
  }
  std::shared_ptr<std::vector<float>> next;
  for (auto& spare : spares_) {
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
  ++copies_;
  return *current_;
}

const float* ParamStore::floats_of(const Buffer& buffer) {
  GRADSYNC_CHECK(buffer.size() == size_ * sizeof(float), "gradient does not match the range");
  // ZeroMQ's frames start at malloc alignment plus its header, always a multiple of 4 on the
  // platforms we know; the copy is a guard for any other, not a path we expect to take.
  const auto address = reinterpret_cast<std::uintptr_t>(buffer.bytes.data());
  if (address % alignof(float) == 0) return reinterpret_cast<const float*>(buffer.bytes.data());
  unaligned_.emplace_back(size_);
  std::memcpy(unaligned_.back().data(), buffer.bytes.data(), buffer.size());
  return unaligned_.back().data();
}

void ParamStore::apply(const Buffer& grad, const ChunkReady& ready) {
  apply_average(std::span<const Buffer>(&grad, 1), ready);
}

void ParamStore::apply_average(std::span<const Buffer> grads, const ChunkReady& ready) {
  GRADSYNC_CHECK(!grads.empty(), "an average of no gradients");
  std::vector<const float*> g;
  for (const Buffer& grad : grads) g.push_back(floats_of(grad));
  const std::span<float> params = writable();
  const float inv = 1.0f / static_cast<float>(grads.size());
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const auto [begin, end] = chunks_[c];
    const std::size_t n = end - begin;
    std::span<const float> mean(g[0] + begin, n);  // the mean of one gradient is itself
    if (grads.size() > 1) {
      // Summed in rank order, then multiplied by 1/N, as the dp strategy does, so a sync
      // parameter server and dp compute bit-identical averages from the same gradients.
      average_.resize(n);
      float* sum = average_.data();
      std::memcpy(sum, g[0] + begin, n * sizeof(float));
      for (std::size_t r = 1; r + 1 < g.size(); ++r) {
        for (std::size_t i = 0; i < n; ++i) sum[i] += g[r][begin + i];
      }
      // The last pass also scales: the same two roundings as a separate pass, one read fewer.
      const float* last = g.back() + begin;
      for (std::size_t i = 0; i < n; ++i) sum[i] = (sum[i] + last[i]) * inv;
      mean = std::span<const float>(sum, n);
    }
    sgd_[c].step(params.subspan(begin, n), mean);
    if (ready) ready(chunks_[c]);
  }
  unaligned_.clear();
}

}  // namespace gradsync
