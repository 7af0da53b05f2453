// What the zero tests share: N ranks as N threads, each with its own MLP, sampler and
// communicator of the backend under test, trained by the zero strategy at a given stage.
// Stages 2 and 3 hand the model the strategy's layer storage, as make_strategy does.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "allreduce/in_memory_store.h"
#include "allreduce/make_communicator.h"
#include "model/mlp.h"
#include "model/sampler.h"
#include "strategies/zero/zero_strategy.h"
#include "tests/support/digesting_strategy.h"
#include "tests/support/training.h"
#include "worker/worker_loop.h"

namespace gradsync::testing {

struct ZeroRun {
  int stage = 1;
  std::string backend = "tcp";
  std::size_t unit_bytes = 4096;
  std::vector<int> widths = {32, 64, 32, 10};
  int global_batch = 64;
  int accumulation = 1;
  SgdOptions sgd{0.05, 0.9, 1e-4};
  CompressionOptions compression;
  std::int64_t eval_every = 0;  // > 0: every rank of stage 3 evaluates too (a collective)
  // When set, each rank's parameter digest after every step (stages 1 and 2: the model's
  // buffer; stage 3 has none to digest, and its ranks are compared by their final parameters).
  std::vector<std::vector<std::uint64_t>>* digests = nullptr;
};

inline std::vector<LoopResult> train_zero(int ranks, const ZeroRun& run, std::int64_t steps) {
  InMemoryStore store;
  std::vector<LoopResult> results(static_cast<std::size_t>(ranks));
  std::vector<std::string> errors(static_cast<std::size_t>(ranks));
  if (run.digests) run.digests->assign(static_cast<std::size_t>(ranks), {});
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        try {
          CommunicatorOptions communicator;
          communicator.backend = run.backend;
          communicator.tcp.timeout = std::chrono::milliseconds(20000);
          auto comm = make_communicator(store, r, ranks, communicator);
          const int batch = run.global_batch / ranks / run.accumulation;
          // What the strategy's storage will hold, the model does not allocate (as
          // worker/model_factory.cpp makes it).
          const bool fp32 = run.compression.method == "none";
          Mlp model(run.widths, batch,
                    run.stage == 3             ? MlpBuffers::kNone
                    : run.stage == 2 && fp32   ? MlpBuffers::kParamsOnly
                                               : MlpBuffers::kFull);
          model.init_params(1 + static_cast<std::uint64_t>(r) * 100);  // init's broadcast evens
          ZeroStrategyOptions options;
          options.stage = run.stage;
          options.unit_bytes = run.unit_bytes;
          options.sgd = run.sgd;
          options.tensors = model.tensors();
          options.params = model.param_count();
          if (run.stage >= 2) options.layers = model.layer_spans();
          options.compression = run.compression;
          ZeroStrategy strategy(comm, options);
          if (LayerStorage* storage = strategy.layer_storage()) {
            REQUIRE(model.set_layer_storage(storage));
          }
          DistributedSampler sampler(synthetic_data().train.size, r, ranks, batch, 1);
          LoopOptions loop;
          loop.steps = steps;
          loop.accumulation_steps = run.accumulation;
          loop.keep_params = true;
          loop.eval_every = run.eval_every;
          const auto& data = synthetic_data();
          if (run.digests) {
            DigestingStrategy digesting(strategy, (*run.digests)[r]);
            results[r] = run_worker_loop(model, digesting, sampler, data, loop, {});
          } else {
            results[r] = run_worker_loop(model, strategy, sampler, data, loop, {});
          }
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
  }
  for (int r = 0; r < ranks; ++r)
    REQUIRE_MESSAGE(errors[r].empty(), "rank " << r << ": " << errors[r]);
  return results;
}

}  // namespace gradsync::testing
