// `allreduce` on two GPU models over the host-staged communicator
// (strategies/allreduce/host_staged_communicator.h, made by make_model_communicator), staged tcp
// and gloo where the build has it, follows the CPU `single` trajectory on the global batch. Two
// ranks as two threads on GPU 0; skips without a GPU.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "allreduce/in_memory_store.h"
#include "gpu_test_support.h"
#include "model/mlp.h"
#include "model/sampler.h"
#include "strategies/allreduce/allreduce_strategy.h"
#include "strategies/allreduce/model_communicator.h"
#include "tests/support/compare.h"
#include "tests/support/host_staged_support.h"
#include "tests/support/ring_ranks.h"
#include "tests/support/training.h"
#include "worker/model_factory.h"
#include "worker/run_plan.h"
#include "worker/worker_loop.h"

using namespace gradsync::testing;
using namespace gradsync::testing::host_staged;
using namespace std::chrono_literals;
using gradsync::Communicator;

TEST_CASE(
    "host-staged communicator: allreduce on GPU models over staged tcp and gloo follows "
    "the CPU single trajectory") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  const int ranks = 2;
  const int batch = 32;  // per rank: `single` runs the global batch of 64
  const std::int64_t steps = 20;
  const gradsync::SgdOptions sgd{0.05, 0.9, 1e-4};
  const std::vector<float> reference = train_single({32, 16}, batch * ranks, steps, sgd);
  const gradsync::Mlp layout({32, 32, 16, 10}, 1);
  for (const std::string& backend : host_backends()) {
    CAPTURE(backend);
    gradsync::InMemoryStore store;
    std::vector<std::vector<float>> finals(ranks);
    std::vector<std::size_t> buckets(ranks);
    run_ranks(
        ranks,
        [&](int r) {
          gradsync::Config config;
          config.strategy = "allreduce";
          config.workers = ranks;
          config.device = "gpu";
          config.comm.backend = backend;
          config.data.kind = "synthetic";
          config.model.hidden = {32, 16};
          config.train.batch = batch;
          config.train.lr = sgd.lr;
          config.train.momentum = sgd.momentum;
          config.train.weight_decay = sgd.weight_decay;
          config.comm.bucket_mb = 0.001;  // one layer a bucket: several in flight in backward
          const gradsync::TrainTest& data = synthetic_data();
          const std::vector<int> widths = gradsync::plan_run(config, data).widths;
          auto model = gradsync::make_model(config, widths, batch, 0);
          gradsync::CommunicatorOptions options;
          options.backend = backend;
          options.tcp.timeout = 20s;
          // Declared after the model, so destroyed before it: no copy lands in freed memory.
          std::shared_ptr<Communicator> comm =
              gradsync::make_model_communicator(store, r, ranks, options, *model);
          gradsync::AllreduceStrategyOptions allreduce;
          allreduce.bucket_bytes = gradsync::bucket_bytes(config);
          allreduce.sgd = gradsync::sgd_options(config);
          allreduce.device = model->device();
          {
            gradsync::AllreduceStrategy strategy(comm, allreduce);
            gradsync::DistributedSampler sampler(data.train.size, r, ranks, batch,
                                                 config.train.seed);
            gradsync::LoopOptions loop;
            loop.steps = steps;
            gradsync::run_worker_loop(*model, strategy, sampler, data, loop, {});
            buckets[r] = strategy.last_buckets().size();
          }
          finals[r].resize(model->param_count());
          model->copy_params_to_host(finals[r]);
        },
        120s);
    CHECK(buckets[0] >= 2);
    CHECK(finals[0] == finals[1]);  // the same reduced gradients, the same update: bitwise
    const double diff = max_relative_difference(finals[0], reference, layout.layers());
    MESSAGE("GPU allreduce over staged " << backend << ", 2 ranks on cuda:0, vs CPU single after "
                                         << steps << " steps: max relative difference " << diff);
    CHECK(diff <= 1e-4);
  }
}
