// Training on a GPU end to end, through the same worker loop as on CPU: `allreduce` with world
// size 1 over NCCL (bucketed, overlapped with backward by event hand-off) and `dp` with G = 1
// on Fashion-MNIST reach the accuracy the CPU runs reach; and the GPU allreduce follows the CPU
// `single` trajectory. Every case skips without a GPU (and without the data set, for the
// Fashion-MNIST ones).
#include <doctest/doctest.h>

#include <filesystem>

#include "../support/compare.h"
#include "../support/training.h"
#include "allreduce/in_memory_store.h"
#include "gpu_test_support.h"
#include "model/data_loader.h"
#include "model/idx_reader.h"
#include "model/mlp.h"
#include "model/sampler.h"
#include "strategies/allreduce/allreduce_strategy.h"
#include "strategies/allreduce/model_communicator.h"
#include "strategies/make_strategy.h"
#include "worker/model_factory.h"
#include "worker/run_plan.h"
#include "worker/worker_loop.h"

namespace {

// The quickstart preset's `single` run: 12 epochs of batch 256 reach 88% on CPU.
gradsync::Config fashion_config(const std::string& strategy) {
  gradsync::Config config;
  config.strategy = strategy;
  config.device = "gpu";
  config.data.kind = "fashion-mnist";
  config.data.dir = gradsync::kFashionMnistDir;
  config.model.hidden = {256, 256};
  config.train.batch = 256;
  config.train.lr = 0.1;
  config.train.momentum = 0.9;
  config.train.weight_decay = 1e-4;
  config.train.seed = 1;
  config.comm.bucket_mb = 0.25;  // several buckets, so overlap is exercised
  return config;
}

struct Trained {
  gradsync::LoopResult result;
  std::vector<float> params;
};

// One rank of `allreduce` over NCCL on GPU 0, world size 1.
Trained train_allreduce(const gradsync::Config& config, const gradsync::TrainTest& data,
                        std::int64_t steps) {
  const std::vector<int> widths = gradsync::plan_run(config, data).widths;
  auto model = gradsync::make_model(config, widths, config.train.batch, 0);
  gradsync::InMemoryStore store;
  auto comm = gradsync::make_model_communicator(store, 0, 1, {}, *model);
  gradsync::AllreduceStrategyOptions options;
  options.bucket_bytes = gradsync::bucket_bytes(config);
  options.sgd = gradsync::sgd_options(config);
  options.device = model->device();
  Trained out;
  {
    gradsync::AllreduceStrategy strategy(comm, options);
    gradsync::DistributedSampler sampler(data.train.size, 0, 1, config.train.batch,
                                         config.train.seed);
    gradsync::LoopOptions loop;
    loop.steps = steps;
    out.result = gradsync::run_worker_loop(*model, strategy, sampler, data, loop, {});
    CHECK(strategy.last_buckets().size() >= 2);
  }
  out.params.resize(model->param_count());
  model->copy_params_to_host(out.params);
  return out;
}

std::int64_t epochs_of_steps(const gradsync::TrainTest& data, int batch, int epochs) {
  return data.train.size / batch * epochs;
}

bool have_fashion_mnist() {
  if (std::filesystem::is_directory(gradsync::kFashionMnistDir)) return true;
  MESSAGE("skipped: " << gradsync::kFashionMnistDir
                      << " is missing (apt-get install dataset-fashion-mnist)");
  return false;
}

}  // namespace

TEST_CASE("gpu training: allreduce over NCCL follows the CPU single trajectory") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  const gradsync::SgdOptions sgd{0.05, 0.9, 1e-4};
  const std::vector<float> reference = gradsync::testing::train_single({32, 16}, 64, 30, sgd);
  gradsync::Config config;
  config.strategy = "allreduce";
  config.device = "gpu";
  config.data.kind = "synthetic";
  config.model.hidden = {32, 16};
  config.train.batch = 64;
  config.train.lr = sgd.lr;
  config.train.momentum = sgd.momentum;
  config.train.weight_decay = sgd.weight_decay;
  config.comm.bucket_mb = 0.001;  // one layer a bucket
  const Trained gpu = train_allreduce(config, gradsync::testing::synthetic_data(), 30);
  const gradsync::Mlp layout({32, 32, 16, 10}, 1);
  const double diff =
      gradsync::testing::max_relative_difference(gpu.params, reference, layout.layers());
  MESSAGE("GPU allreduce vs CPU single after 30 steps: max relative difference " << diff);
  CHECK(diff <= 1e-4);
}

TEST_CASE("gpu training: allreduce over NCCL, world size 1, reaches 88% on Fashion-MNIST") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  if (!have_fashion_mnist()) return;
  const gradsync::Config config = fashion_config("allreduce");
  const gradsync::TrainTest data = gradsync::load_data(config.data, config.train.seed);
  const Trained trained =
      train_allreduce(config, data, epochs_of_steps(data, config.train.batch, 12));
  REQUIRE(!trained.result.evals.empty());
  const double accuracy = trained.result.evals.back().test_accuracy;
  MESSAGE("allreduce/NCCL on cuda:0: test accuracy " << accuracy << " after "
                                                     << trained.result.steps << " steps, "
                                                     << trained.result.train_seconds << " s");
  CHECK(accuracy >= 0.88);
}

TEST_CASE("gpu training: dp with G = 1 reaches 88% on Fashion-MNIST") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  if (!have_fashion_mnist()) return;
  const gradsync::Config config = fashion_config("dp");
  const gradsync::TrainTest data = gradsync::load_data(config.data, config.train.seed);
  gradsync::StrategyOptions options;
  options.name = "dp";
  options.workers = 1;
  options.sgd = gradsync::sgd_options(config);
  options.device = 0;
  auto strategies = gradsync::make_strategies(options);
  REQUIRE(strategies.size() == 1);
  const std::vector<int> widths = gradsync::plan_run(config, data).widths;
  auto model = gradsync::make_model(config, widths, config.train.batch, 0);
  gradsync::DistributedSampler sampler(data.train.size, 0, 1, config.train.batch,
                                       config.train.seed);
  gradsync::LoopOptions loop;
  loop.steps = epochs_of_steps(data, config.train.batch, 12);
  const gradsync::LoopResult result =
      gradsync::run_worker_loop(*model, *strategies.front(), sampler, data, loop, {});
  REQUIRE(!result.evals.empty());
  MESSAGE("dp (G=1) on cuda:0: test accuracy " << result.evals.back().test_accuracy << " after "
                                               << result.steps << " steps");
  CHECK(result.evals.back().test_accuracy >= 0.88);
  CHECK(strategies.front()->optimizer() != nullptr);
}
