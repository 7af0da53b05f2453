// ModelStateMemory: the bytes of model state this process holds, counted where the buffers are
// allocated and freed: parameters, gradients and optimizer state, each with its current and
// peak size, the sum's peak too. What a rank reports as "peak model-state bytes" (ZeRO's
// comparison: stage 1 shards the optimizer state, stage 2 also the gradients, stage 3 also the
// parameters), measured rather than computed from a formula.
//
//   TrackedBuffer<float> momentum(ModelState::kOptimizer, n);         // a counted std::vector
//   TrackedBytes counted(ModelState::kParams, device_bytes);          // a buffer held elsewhere
//   ModelStateMemory::instance().add(ModelState::kParams, bytes);     // by hand, where a buffer
//   ModelStateMemory::instance().remove(ModelState::kParams, bytes);  // is made and where it goes
//   ModelStateMemory::instance().peak_total()                         // bytes, since start/reset
//
// What counts: the buffers that are model state (a model's flat parameter and gradient
// buffers, an optimizer's momentum, a strategy's shards and gathered layers), wherever they
// live (host or device memory). What does not: activations, scratch, communication staging,
// checkpoint copies. A buffer counts at its allocated size (a vector's capacity).
//
// One ledger per process (a rank); in-process runs (dp's replicas, tests with ranks as threads,
// a ps shard run as a thread) share it, so its figures mean "this process".
// Thread-safe: every counter is an atomic, and each peak is raised with a compare-exchange loop
// to the value its counter reached at each add, so a peak is exact under concurrent adds and
// removes too (a counter only rises at an add, and every add sees the value it made). The
// total is a counter of its own: its peak is the peak of the sum, which may be less than the
// sum of the kinds' peaks (they need not peak together). reset_peaks() must not race with
// add/remove (call it where a run begins, before its buffers are made).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace gradsync {

enum class ModelState { kParams = 0, kGrads = 1, kOptimizer = 2 };
inline constexpr std::size_t kModelStateKinds = 3;

// "params", "grads", "optimizer": the kinds' names in JSON and messages.
const char* to_string(ModelState kind);

// One figure per kind and their sum: a snapshot of the currents or of the peaks.
struct ModelStateBytes {
  std::uint64_t params = 0;
  std::uint64_t grads = 0;
  std::uint64_t optimizer = 0;
  std::uint64_t total = 0;
};

class ModelStateMemory {
 public:
  // The process's ledger. Never destroyed before other statics: it is trivially destructible.
  static ModelStateMemory& instance();

  void add(ModelState kind, std::uint64_t bytes) noexcept;
  // `bytes` must have been added under `kind` before (TrackedBytes keeps that balance).
  void remove(ModelState kind, std::uint64_t bytes) noexcept;

  std::uint64_t current(ModelState kind) const;
  std::uint64_t peak(ModelState kind) const;
  std::uint64_t current_total() const;
  std::uint64_t peak_total() const;
  ModelStateBytes currents() const;
  ModelStateBytes peaks() const;
  // Peaks start again from the current sizes (a new run in the same process, a test).
  void reset_peaks();

 private:
  std::array<std::atomic<std::uint64_t>, kModelStateKinds> current_{};
  std::array<std::atomic<std::uint64_t>, kModelStateKinds> peak_{};
  std::atomic<std::uint64_t> total_{0};
  std::atomic<std::uint64_t> peak_total_{0};
};

// `bytes` of `kind` held in the ledger for this object's lifetime: the RAII form of add/remove,
// for a buffer that is not a TrackedBuffer (a device buffer, a strategy's own allocation).
// Move-only; a moved-from or reset TrackedBytes holds nothing.
class TrackedBytes {
 public:
  TrackedBytes() = default;
  TrackedBytes(ModelState kind, std::uint64_t bytes) : kind_(kind) { set(bytes); }
  ~TrackedBytes() { set(0); }
  TrackedBytes(TrackedBytes&& other) noexcept
      : kind_(other.kind_), bytes_(std::exchange(other.bytes_, 0)) {}
  TrackedBytes& operator=(TrackedBytes&& other) noexcept {
    if (this != &other) {
      set(0);
      kind_ = other.kind_;
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  TrackedBytes(const TrackedBytes&) = delete;
  TrackedBytes& operator=(const TrackedBytes&) = delete;

  // Holds `bytes` from now on: the ledger moves by the difference (a buffer grown or shrunk).
  void set(std::uint64_t bytes) {
    if (bytes > bytes_) ModelStateMemory::instance().add(kind_, bytes - bytes_);
    if (bytes < bytes_) ModelStateMemory::instance().remove(kind_, bytes_ - bytes);
    bytes_ = bytes;
  }
  void reset() { set(0); }
  ModelState kind() const { return kind_; }
  std::uint64_t bytes() const { return bytes_; }

 private:
  ModelState kind_ = ModelState::kParams;
  std::uint64_t bytes_ = 0;
};

// A std::vector<T, Allocator> whose capacity is counted in the ledger under `kind` for its
// lifetime. Move-only (a copy of model state is a second allocation: make it explicitly).
// Change its size through resize() and clear(), which recount; vector() gives the vector for
// reading and writing elements, not for changing its size (the ledger would not see it; the
// destructor still removes exactly what was counted).
template <typename T, typename Allocator = std::allocator<T>>
class TrackedBuffer {
 public:
  using Vector = std::vector<T, Allocator>;

  TrackedBuffer() = default;  // empty; counted as kParams if resized: prefer the next one
  // Empty, counted under `kind` once resized.
  explicit TrackedBuffer(ModelState kind) : counted_(kind, 0) {}
  TrackedBuffer(ModelState kind, std::size_t n, T value = T{})
      : data_(n, value), counted_(kind, capacity_bytes()) {}
  TrackedBuffer(TrackedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, Vector())), counted_(std::move(other.counted_)) {}
  TrackedBuffer& operator=(TrackedBuffer&& other) noexcept {
    if (this != &other) {
      data_ = std::exchange(other.data_, Vector());
      counted_ = std::move(other.counted_);
    }
    return *this;
  }
  TrackedBuffer(const TrackedBuffer&) = delete;
  TrackedBuffer& operator=(const TrackedBuffer&) = delete;
  ~TrackedBuffer() = default;  // counted_ removes its bytes

  // Resizes (new elements = value) and counts the new capacity.
  void resize(std::size_t n, T value = T{}) {
    data_.resize(n, value);
    counted_.set(capacity_bytes());
  }
  // Frees the storage (not only the elements) and counts nothing: ZeRO's freed gradient bucket,
  // a gathered layer dropped after use.
  void clear() {
    Vector().swap(data_);
    counted_.reset();
  }

  ModelState kind() const { return counted_.kind(); }
  std::uint64_t counted_bytes() const { return counted_.bytes(); }

  Vector& vector() { return data_; }
  const Vector& vector() const { return data_; }
  T* data() { return data_.data(); }
  const T* data() const { return data_.data(); }
  std::size_t size() const { return data_.size(); }
  bool empty() const { return data_.empty(); }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  auto begin() { return data_.begin(); }
  auto end() { return data_.end(); }
  auto begin() const { return data_.begin(); }
  auto end() const { return data_.end(); }
  std::span<T> span() { return data_; }
  std::span<const T> span() const { return data_; }
  operator std::span<T>() { return data_; }
  operator std::span<const T>() const { return data_; }

 private:
  std::uint64_t capacity_bytes() const { return std::uint64_t(data_.capacity()) * sizeof(T); }

  Vector data_;  // before counted_: counted from its capacity at construction
  TrackedBytes counted_;
};

}  // namespace gradsync
