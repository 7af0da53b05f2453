// A strategy wrapper for the "ranks bitwise equal after every step" checks: it records a digest
// of the parameters after each synchronize() of the strategy it wraps, so that the digests of
// every rank can be compared step by step.
//
//   std::vector<std::uint64_t> digests;
//   DigestingStrategy digesting(strategy, digests);
//   run_worker_loop(model, digesting, sampler, data, loop, {});   // digests[step]
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "strategies/sync_strategy.h"

namespace gradsync::testing {

// FNV-1a over the parameters' bytes: equal digests, bitwise equal parameters (in practice).
inline std::uint64_t digest(std::span<const float> params) {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto byte : std::as_bytes(params)) {
    h = (h ^ static_cast<std::uint8_t>(byte)) * 1099511628211ull;
  }
  return h;
}

class DigestingStrategy final : public SyncStrategy {
 public:
  DigestingStrategy(SyncStrategy& inner, std::vector<std::uint64_t>& out)
      : inner_(inner), out_(out) {}
  std::string_view name() const override { return inner_.name(); }
  int rank() const override { return inner_.rank(); }
  void attach_buffers(std::span<float> buffers) override { inner_.attach_buffers(buffers); }
  void init(std::span<float> params) override { inner_.init(params); }
  void gradient_ready(std::span<float> grads, std::size_t begin, std::size_t end) override {
    inner_.gradient_ready(grads, begin, end);
  }
  void synchronize(std::span<float> grads, std::span<float> params) override {
    inner_.synchronize(grads, params);
    out_.push_back(digest(params));
  }
  void finish(std::span<float> grads, std::span<float> params) override {
    inner_.finish(grads, params);
  }
  StepStats last_step_stats() const override { return inner_.last_step_stats(); }
  Optimizer* optimizer() override { return inner_.optimizer(); }
  void abort(const std::string& reason) override { inner_.abort(reason); }

 private:
  SyncStrategy& inner_;
  std::vector<std::uint64_t>& out_;
};

}  // namespace gradsync::testing
