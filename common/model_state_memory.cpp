#include "common/model_state_memory.h"

namespace gradsync {
namespace {

// Raises `peak` to `value` unless it is already at least that. A plain load-compare-store
// could lose to a concurrent raise (two adds each store their own value, the lower one last):
// the compare-exchange retries with the peak it found until its value is no longer higher.
void raise_to(std::atomic<std::uint64_t>& peak, std::uint64_t value) noexcept {
  std::uint64_t seen = peak.load(std::memory_order_relaxed);
  while (seen < value && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

std::size_t index(ModelState kind) { return static_cast<std::size_t>(kind); }

}  // namespace

const char* to_string(ModelState kind) {
  switch (kind) {
    case ModelState::kParams:
      return "params";
    case ModelState::kGrads:
      return "grads";
    case ModelState::kOptimizer:
      return "optimizer";
  }
  return "unknown";
}

ModelStateMemory& ModelStateMemory::instance() {
  // Constant-initialised and trivially destructible: usable from any static's constructor or
  // destructor, whatever the order of initialisation.
  static constinit ModelStateMemory ledger;
  return ledger;
}

// Relaxed ordering throughout: the counters order nothing else, and fetch_add's result is the
// counter's value right after this add in the counter's own modification order, so every value
// the counter ever rose to is seen by exactly one add and offered to the peak.
void ModelStateMemory::add(ModelState kind, std::uint64_t bytes) noexcept {
  if (bytes == 0) return;
  const std::size_t k = index(kind);
  raise_to(peak_[k], current_[k].fetch_add(bytes, std::memory_order_relaxed) + bytes);
  raise_to(peak_total_, total_.fetch_add(bytes, std::memory_order_relaxed) + bytes);
}

void ModelStateMemory::remove(ModelState kind, std::uint64_t bytes) noexcept {
  if (bytes == 0) return;
  current_[index(kind)].fetch_sub(bytes, std::memory_order_relaxed);
  total_.fetch_sub(bytes, std::memory_order_relaxed);
}

std::uint64_t ModelStateMemory::current(ModelState kind) const {
  return current_[index(kind)].load(std::memory_order_relaxed);
}

std::uint64_t ModelStateMemory::peak(ModelState kind) const {
  return peak_[index(kind)].load(std::memory_order_relaxed);
}

std::uint64_t ModelStateMemory::current_total() const {
  return total_.load(std::memory_order_relaxed);
}

std::uint64_t ModelStateMemory::peak_total() const {
  return peak_total_.load(std::memory_order_relaxed);
}

ModelStateBytes ModelStateMemory::currents() const {
  return {current(ModelState::kParams), current(ModelState::kGrads),
          current(ModelState::kOptimizer), current_total()};
}

ModelStateBytes ModelStateMemory::peaks() const {
  return {peak(ModelState::kParams), peak(ModelState::kGrads), peak(ModelState::kOptimizer),
          peak_total()};
}

void ModelStateMemory::reset_peaks() {
  for (std::size_t k = 0; k < kModelStateKinds; ++k) {
    peak_[k].store(current_[k].load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  peak_total_.store(total_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace gradsync
