// The model-state ledger (common/model_state_memory.h): what it counts, that its peaks are
// exact under concurrent updates, and that the models and the optimizer are counted exactly.
// The ledger is the process's: every check is against the figures it had when the test began.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/model_state_memory.h"
#include "gpu_test_support.h"
#include "model/make_optimizer.h"
#include "model/mlp.h"
#include "model/optimizer/sgd.h"
#include "model/synthetic_model.h"
#include "tests/support/training.h"
#include "worker/in_process.h"

namespace gradsync {
namespace {

ModelStateMemory& ledger() { return ModelStateMemory::instance(); }

// The ledger's currents less those at construction, per kind and in all.
struct Since {
  ModelStateBytes start = ledger().currents();
  std::uint64_t params() const { return ledger().current(ModelState::kParams) - start.params; }
  std::uint64_t grads() const { return ledger().current(ModelState::kGrads) - start.grads; }
  std::uint64_t optimizer() const {
    return ledger().current(ModelState::kOptimizer) - start.optimizer;
  }
  std::uint64_t total() const { return ledger().current_total() - start.total; }
};

}  // namespace

TEST_CASE("model-state memory: add and remove move the currents; peaks stay until reset") {
  ledger().reset_peaks();
  const Since since;
  ledger().add(ModelState::kParams, 400);
  ledger().add(ModelState::kGrads, 400);
  ledger().add(ModelState::kOptimizer, 100);
  CHECK(since.params() == 400);
  CHECK(since.grads() == 400);
  CHECK(since.optimizer() == 100);
  CHECK(since.total() == 900);
  ledger().remove(ModelState::kGrads, 300);  // a gradient bucket freed once reduced
  ledger().add(ModelState::kOptimizer, 200);
  CHECK(since.grads() == 100);
  CHECK(since.total() == 800);
  // Each kind's peak is its own; the total's is the sum's, reached before the grads went.
  CHECK(ledger().peak(ModelState::kParams) == since.start.params + 400);
  CHECK(ledger().peak(ModelState::kGrads) == since.start.grads + 400);
  CHECK(ledger().peak(ModelState::kOptimizer) == since.start.optimizer + 300);
  CHECK(ledger().peak_total() == since.start.total + 900);
  const ModelStateBytes peaks = ledger().peaks();
  CHECK(peaks.total == ledger().peak_total());
  CHECK(peaks.grads == ledger().peak(ModelState::kGrads));

  ledger().remove(ModelState::kParams, 400);
  ledger().remove(ModelState::kGrads, 100);
  ledger().remove(ModelState::kOptimizer, 300);
  CHECK(since.total() == 0);
  CHECK(ledger().peak_total() == since.start.total + 900);
  // A new run: the peaks start from what is held now.
  ledger().reset_peaks();
  CHECK(ledger().peaks().total == ledger().current_total());
  CHECK(ledger().peak(ModelState::kGrads) == ledger().current(ModelState::kGrads));
  CHECK(std::string(to_string(ModelState::kOptimizer)) == "optimizer");
}

TEST_CASE("model-state memory: a TrackedBuffer counts its capacity for its lifetime") {
  ledger().reset_peaks();
  const Since since;
  {
    TrackedBuffer<float> a(ModelState::kParams, 10, 1.f);
    CHECK(a.size() == 10);
    CHECK(a[9] == 1.f);
    CHECK(since.params() == 40);
    CHECK(a.counted_bytes() == 40);

    // A move hands the count over: nothing added, nothing lost.
    TrackedBuffer<float> b(std::move(a));
    CHECK(since.params() == 40);
    CHECK(b.size() == 10);
    CHECK(a.empty());
    CHECK(a.counted_bytes() == 0);

    // Assigning over a buffer that holds some: its own count goes, the incoming one stays.
    TrackedBuffer<float> c(ModelState::kGrads, 6);
    CHECK(since.grads() == 24);
    c = std::move(b);
    CHECK(since.grads() == 0);
    CHECK(since.params() == 40);
    CHECK(c.kind() == ModelState::kParams);
    CHECK(c.size() == 10);

    // resize() and clear() recount; a span sees the elements.
    TrackedBuffer<double> d(ModelState::kOptimizer);
    CHECK(since.optimizer() == 0);
    d.resize(5, 2.0);
    CHECK(since.optimizer() == 40);
    const std::span<const double> view = std::as_const(d);
    CHECK(view.size() == 5);
    d.clear();
    CHECK(since.optimizer() == 0);
    CHECK(d.vector().capacity() == 0);

    // Moving into itself changes nothing.
    TrackedBuffer<float>& self = c;
    c = std::move(self);
    CHECK(since.params() == 40);
  }
  CHECK(since.total() == 0);
  // The most at once: c's 40 bytes of parameters and d's 40 of optimizer state.
  CHECK(ledger().peak_total() == since.start.total + 40 + 40);
}

TEST_CASE("model-state memory: TrackedBytes holds a count for a buffer kept elsewhere") {
  const Since since;
  {
    TrackedBytes device(ModelState::kGrads, 1000);
    CHECK(since.grads() == 1000);
    device.set(600);  // shrunk
    CHECK(since.grads() == 600);
    TrackedBytes moved = std::move(device);
    CHECK(device.bytes() == 0);
    CHECK(since.grads() == 600);
    moved.reset();
    CHECK(since.grads() == 0);
    moved.set(8);
  }
  CHECK(since.total() == 0);
}

TEST_CASE("model-state memory: concurrent adds and removes keep the totals and the peak exact") {
  constexpr int kThreads = 8;
  constexpr int kAdds = 20000;
  constexpr std::uint64_t kBytes = 8;
  ledger().reset_peaks();
  const Since since;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([t] {
        const ModelState kind = static_cast<ModelState>(t % 3);
        for (int i = 0; i < kAdds; ++i) ledger().add(kind, kBytes);
      });
    }
  }
  const std::uint64_t all = std::uint64_t{kThreads} * kAdds * kBytes;
  CHECK(since.total() == all);
  CHECK(since.params() + since.grads() + since.optimizer() == all);
  CHECK(since.params() == 3 * kAdds * kBytes);  // threads 0, 3, 6
  CHECK(ledger().peak_total() == since.start.total + all);
  CHECK(ledger().peak(ModelState::kParams) == since.start.params + 3 * kAdds * kBytes);
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([t] {
        const ModelState kind = static_cast<ModelState>(t % 3);
        for (int i = 0; i < kAdds; ++i) ledger().remove(kind, kBytes);
      });
    }
  }
  CHECK(since.total() == 0);
  CHECK(ledger().peak_total() == since.start.total + all);

  // Each thread holds at most one buffer at a time: however the threads interleave, the peak
  // lies between one buffer and one per thread, and every byte is given back.
  ledger().reset_peaks();
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([] {
        for (int i = 0; i < kAdds / 10; ++i) TrackedBuffer<float> held(ModelState::kGrads, 16);
      });
    }
  }
  CHECK(since.total() == 0);
  CHECK(ledger().peak(ModelState::kGrads) >= since.start.grads + 64);
  CHECK(ledger().peak(ModelState::kGrads) <= since.start.grads + kThreads * 64);
}

TEST_CASE("model-state memory: an Mlp and its Sgd count 4 bytes per parameter of each kind") {
  const Since since;
  {
    // 5-7-3: (5*7 + 7) + (7*3 + 3) = 66 parameters.
    Mlp mlp({5, 7, 3}, 32);
    constexpr std::uint64_t kP = 66;
    REQUIRE(mlp.param_count() == kP);
    CHECK(since.params() == 4 * kP);
    CHECK(since.grads() == 4 * kP);  // activations and scratch are not model state
    CHECK(since.optimizer() == 0);
    Sgd sgd(mlp.param_count(), {0.1, 0.9, 0.0});
    CHECK(since.optimizer() == 4 * kP);
    CHECK(since.total() == 3 * 4 * kP);
    // A moved model is still one model.
    Mlp moved(std::move(mlp));
    CHECK(since.params() == 4 * kP);
    CHECK(moved.params().size() == kP);
  }
  CHECK(since.total() == 0);
  {
    SyntheticModel synthetic(1000, 4, std::chrono::nanoseconds(0));
    CHECK(since.params() == 4000);
    CHECK(since.grads() == 4000);
  }
  CHECK(since.total() == 0);
}

TEST_CASE("model-state memory: a GPU model and its optimizer count their device buffers") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  Config config;
  config.device = "gpu";
  const Since since;
  {
    const std::unique_ptr<Model> model = make_model(config, {5, 7, 3}, 32, 0);
    constexpr std::uint64_t kP = 66;
    REQUIRE(model->param_count() == kP);
    // Parameters and gradients only: no host copy of the layout, no activations.
    CHECK(since.params() == 4 * kP);
    CHECK(since.grads() == 4 * kP);
    const std::unique_ptr<Optimizer> sgd = make_sgd(kP, {0.1, 0.9, 0.0}, 0);
    CHECK(since.optimizer() == 4 * kP);
  }
  CHECK(since.total() == 0);
}

TEST_CASE("model-state memory: a run reports its own peak, every replica of dp counted") {
  Config config;
  config.train.batch = 8;
  config.model.hidden = {16};
  LoopOptions loop;
  loop.steps = 2;
  loop.evaluate = false;
  // 32 features, 16 hidden, 10 classes: (32*16 + 16) + (16*10 + 10) = 698 parameters.
  constexpr std::uint64_t kBytes = 4 * 698;
  const Since since;
  const std::vector<LoopResult> single =
      train_in_process(config, testing::synthetic_data(), loop, {}, {});
  REQUIRE(single.size() == 1);
  CHECK(single[0].parameters == 698);
  CHECK(single[0].peak_params_bytes - since.start.params == kBytes);
  CHECK(single[0].peak_grads_bytes - since.start.grads == kBytes);
  CHECK(single[0].peak_optimizer_bytes - since.start.optimizer == kBytes);
  CHECK(single[0].peak_model_state_bytes - since.start.total == 3 * kBytes);

  // dp: two replicas in this process, the optimizer on replica 0 only. The smaller run after
  // a larger one reports its own peak: train_in_process resets the peaks.
  config.strategy = "dp";
  config.workers = 2;
  const std::vector<LoopResult> dp =
      train_in_process(config, testing::synthetic_data(), loop, {}, {});
  REQUIRE(dp.size() == 2);
  for (const LoopResult& replica : dp) {
    CHECK(replica.peak_params_bytes - since.start.params == 2 * kBytes);
    CHECK(replica.peak_grads_bytes - since.start.grads == 2 * kBytes);
    CHECK(replica.peak_optimizer_bytes - since.start.optimizer == kBytes);
    CHECK(replica.peak_model_state_bytes - since.start.total == 5 * kBytes);
  }
  config.strategy = "single";
  config.workers = 1;
  const std::vector<LoopResult> again =
      train_in_process(config, testing::synthetic_data(), loop, {}, {});
  CHECK(again[0].peak_model_state_bytes - since.start.total == 3 * kBytes);
  CHECK(since.total() == 0);
}

}  // namespace gradsync
