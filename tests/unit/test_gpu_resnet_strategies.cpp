// The GPU ResNet under `allreduce`: its running statistics and SyncBatchNorm's sums are host
// memory (Model::buffers(), Model::BatchStatsReducer) and the communicator of a GPU model takes
// device memory only, so comm.broadcast_buffers (DDP) and model.sync_batchnorm (SyncBatchNorm)
// go through a device buffer (strategies/buffer_staging.h). Two ranks as two threads
// sharing GPU 0 over staged tcp, built through make_strategies as `gradsync worker` builds
// them, against the same two ranks on the CPU and against GPU `single` on the global batch.
// Skips without a GPU.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "allreduce/in_memory_store.h"
#include "gpu_test_support.h"
#include "model/sampler.h"
#include "model/synthetic_data.h"
#include "strategies/allreduce/model_communicator.h"
#include "strategies/make_strategy.h"
#include "tests/support/compare.h"
#include "worker/in_process.h"
#include "worker/model_factory.h"
#include "worker/run_plan.h"
#include "worker/worker_loop.h"

namespace {

using gradsync::Config;

constexpr int kSide = 8;  // 8 x 8 one-channel images: data.dim 64

const gradsync::TrainTest& images() {
  static const gradsync::TrainTest set = [] {
    gradsync::SyntheticDataOptions options;
    options.train_samples = 1024;
    options.test_samples = 128;
    options.dim = kSide * kSide;
    return gradsync::make_synthetic_data(options);
  }();
  return set;
}

Config resnet_config(const std::string& device, bool broadcast_buffers) {
  Config config;
  config.strategy = "allreduce";
  config.workers = 2;
  config.device = device;
  config.data.kind = "synthetic";
  config.data.dim = kSide * kSide;
  config.model.kind = "resnet";
  config.model.resnet_width = 4;
  config.train.batch = 16;  // per rank
  config.train.lr = 0.02;
  config.train.momentum = 0.9;
  config.comm.backend = "tcp";  // staged through pinned host memory on the GPU
  config.comm.timeout_s = 20;
  config.comm.bucket_mb = 4096.0 / (1 << 20);  // several buckets in flight in backward
  config.comm.broadcast_buffers = broadcast_buffers;
  return config;
}

struct RankEnd {
  std::vector<float> params, buffers;
};

// Both ranks' parameters and running statistics after `steps` steps.
std::vector<RankEnd> train(const Config& config, std::int64_t steps) {
  const int n = config.workers;
  const std::vector<int> widths = {kSide * kSide, 10};
  gradsync::InMemoryStore store;
  std::vector<RankEnd> out(static_cast<std::size_t>(n));
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        try {
          const int device = config.device == "gpu" ? 0 : -1;
          auto model = device < 0 ? gradsync::make_model(config, widths, config.train.batch)
                                  : gradsync::make_model(config, widths, config.train.batch, 0);
          gradsync::CommunicatorOptions communicator;
          communicator.backend = config.comm.backend;
          communicator.tcp.timeout = std::chrono::seconds(20);
          auto comm = gradsync::make_model_communicator(store, r, n, communicator, *model);
          const gradsync::StrategyOptions options = gradsync::strategy_options(config, 0, {}, r);
          const gradsync::ProcessContext process{.rank = r, .model = model.get(), .comm = comm};
          {
            auto strategy = std::move(gradsync::make_strategies(options, process).front());
            gradsync::DistributedSampler sampler(images().train.size, r, n, config.train.batch,
                                                 config.train.seed);
            gradsync::LoopOptions loop;
            loop.steps = steps;
            loop.evaluate = false;
            gradsync::run_worker_loop(*model, *strategy, sampler, images(), loop, {});
          }
          out[r].params.resize(model->param_count());
          model->copy_params_to_host(out[r].params);
          out[r].buffers.assign(model->buffers().begin(), model->buffers().end());
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
  }
  for (int r = 0; r < n; ++r) REQUIRE_MESSAGE(errors[r].empty(), "rank " << r << ": " << errors[r]);
  return out;
}

// max |a - b| / max |b| over the whole vector (compare.h's).
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  return gradsync::testing::tensor_relative_difference(a, b);
}

}  // namespace

TEST_CASE(
    "gpu resnet: allreduce over staged tcp broadcasts rank 0's running statistics, as on the "
    "CPU") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  const std::int64_t steps = 6;
  const std::vector<RankEnd> gpu = train(resnet_config("gpu", true), steps);
  const std::vector<RankEnd> cpu = train(resnet_config("cpu", true), steps);
  const std::vector<RankEnd> own = train(resnet_config("gpu", false), steps);

  CHECK(gpu[0].params == gpu[1].params);    // the same reduced gradients, the same update
  CHECK(gpu[0].buffers == gpu[1].buffers);  // rank 1 holds rank 0's, bit for bit
  // Without the broadcast each rank keeps its own batches' statistics: they differ, so the
  // equality above is the broadcast's doing. The parameters do not depend on it (training
  // normalises by the batch's statistics).
  CHECK(own[0].buffers != own[1].buffers);
  CHECK(own[0].params == gpu[0].params);
  CHECK(own[0].buffers == gpu[0].buffers);

  // The CPU ranks do the same arithmetic in another order (gpu-check.sh's bound for ResNet).
  const double params = relative_difference(gpu[0].params, cpu[0].params);
  const double buffers = relative_difference(gpu[1].buffers, cpu[1].buffers);
  MESSAGE("GPU ResNet allreduce over staged tcp, 2 ranks on cuda:0, vs the CPU's after "
          << steps << " steps: parameters " << params << ", rank 1's running statistics "
          << buffers);
  CHECK(params <= 2e-3);
  CHECK(buffers <= 2e-3);
}

TEST_CASE(
    "gpu resnet: with sync_batchnorm, two ranks sharing the GPU follow GPU single on the global "
    "batch") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  const std::int64_t steps = 30;
  Config sync = resnet_config("gpu", false);  // each rank its own buffers: the sums equalise them
  sync.model.sync_batchnorm = true;
  const std::vector<RankEnd> ranks = train(sync, steps);

  Config single = resnet_config("gpu", true);
  single.strategy = "single";
  single.workers = 1;
  single.train.batch = sync.train.batch * sync.workers;
  gradsync::LoopOptions loop;
  loop.steps = steps;
  loop.keep_params = true;
  loop.evaluate = false;
  const gradsync::LoopResult one =
      gradsync::train_in_process(single, images(), loop, {}, {}).front();

  CHECK(ranks[0].params == ranks[1].params);
  CHECK(ranks[0].buffers == ranks[1].buffers);
  const double params = relative_difference(ranks[0].params, one.final_params);
  const double buffers = relative_difference(ranks[0].buffers, one.final_buffers);
  MESSAGE(
      "GPU ResNet allreduce with sync_batchnorm, 2 ranks on cuda:0, vs GPU single on the "
      "global batch after "
      << steps << " steps: parameters " << params << ", running statistics " << buffers);
  CHECK(params <= 1e-4);
  CHECK(buffers <= 1e-4);
}
