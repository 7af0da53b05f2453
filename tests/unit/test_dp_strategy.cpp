#include <doctest/doctest.h>

#include <thread>

#include "common/error.h"
#include "model/mlp.h"
#include "model/synthetic_data.h"
#include "strategies/dp/dp_strategy.h"
#include "strategies/make_strategy.h"
#include "tests/support/compare.h"
#include "tests/support/training.h"
#include "worker/in_process.h"
#include "worker/run_plan.h"

namespace {

gradsync::Config synthetic_config(const std::string& strategy, int workers, int batch) {
  gradsync::Config config;
  config.strategy = strategy;
  config.workers = workers;
  config.train.batch = batch;
  config.train.steps = 50;
  config.train.lr = 0.05;
  config.train.momentum = 0.9;
  config.train.weight_decay = 1e-4;
  config.data.kind = "synthetic";
  config.model.hidden = {64, 32};
  return config;
}

std::vector<float> train_and_keep(const gradsync::Config& config, const gradsync::TrainTest& data) {
  gradsync::LoopOptions loop;
  loop.steps = config.train.steps;
  loop.keep_params = true;
  auto results = gradsync::train_in_process(config, data, loop, {}, {});
  // Synchronous replicas must end identical to one another, not only close to `single`.
  for (const auto& r : results) CHECK(r.final_params == results.front().final_params);
  return results.front().final_params;
}

}  // namespace

TEST_CASE("dp: N replicas follow `single` on the global batch for 50 steps") {
  gradsync::SyntheticDataOptions options;
  options.train_samples = 4096;
  options.test_samples = 256;
  const gradsync::TrainTest data = gradsync::make_synthetic_data(options);
  const int per_worker = 16;
  for (int workers : {1, 2, 4}) {
    CAPTURE(workers);
    const auto single = train_and_keep(synthetic_config("single", 1, per_worker * workers), data);
    const auto dp = train_and_keep(synthetic_config("dp", workers, per_worker), data);
    gradsync::Mlp fresh({options.dim, 64, 32, options.classes}, 1);
    fresh.init_params(1);
    const auto& layers = fresh.layers();
    const double diff = gradsync::testing::max_relative_difference(dp, single, layers);
    MESSAGE("dp with " << workers << " replicas vs single: max relative difference " << diff);
    CHECK(diff <= 1e-5);
    // The trajectories must also have moved: equal because nothing trained would prove nothing.
    const std::vector<float> initial(fresh.params().begin(), fresh.params().end());
    CHECK(gradsync::testing::max_relative_difference(dp, initial, layers) > 1e-2);
  }
}

TEST_CASE("dp: reports DataParallel's traffic, replica 0 moving (N-1) models each way") {
  auto replicas = gradsync::make_dp_group(3, {}, std::chrono::milliseconds(5000));
  std::vector<std::vector<float>> params(3, std::vector<float>(10, 1.f));
  std::vector<std::vector<float>> grads(3, std::vector<float>(10, 0.f));
  std::vector<std::jthread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      replicas[r]->init(params[r]);
      std::fill(grads[r].begin(), grads[r].end(), float(r));  // mean gradient = 1
      replicas[r]->synchronize(grads[r], params[r]);
    });
  }
  threads.clear();
  const std::uint64_t model_bytes = 10 * sizeof(float);
  CHECK(replicas[0]->last_step_stats().bytes_received == 2 * model_bytes);
  CHECK(replicas[0]->last_step_stats().bytes_sent == 2 * model_bytes);
  CHECK(replicas[1]->last_step_stats().bytes_sent == model_bytes);
  CHECK(replicas[2]->last_step_stats().bytes_received == model_bytes);
  for (int r = 0; r < 3; ++r) CHECK(params[r][0] == doctest::Approx(1.0 - 0.05 * 1.0));
}

TEST_CASE("dp: a replica that never arrives ends the wait with a message naming it") {
  auto replicas = gradsync::make_dp_group(2, {}, std::chrono::milliseconds(100));
  std::vector<float> params(4, 0.f), grads(4, 0.f);
  try {
    replicas[0]->init(params);
    FAIL("init returned without replica 1");
  } catch (const gradsync::TimeoutError& e) {
    CHECK(std::string(e.what()).find("replica(s) 1") != std::string::npos);
    CHECK(e.rank() == 1);
  }
}

TEST_CASE("dp: aborting one replica wakes the others with the reason") {
  auto replicas = gradsync::make_dp_group(2, {}, std::chrono::milliseconds(10000));
  std::vector<float> params(4, 0.f);
  std::string error;
  std::jthread waiter([&] {
    try {
      replicas[0]->init(params);
    } catch (const gradsync::Error& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  replicas[1]->abort("replica 1 ran out of memory");
  waiter.join();
  CHECK(error.find("replica 1 ran out of memory") != std::string::npos);
}

TEST_CASE("strategies: a wrong name lists the valid ones") {
  gradsync::StrategyOptions options;
  options.name = "ddp";
  CHECK_THROWS_WITH(gradsync::make_strategies(options),
                    doctest::Contains("valid: single, dp, allreduce, zero, ps"));
}

TEST_CASE("dp: the replicas' waits use comm.timeout_s from the preset") {
  gradsync::Config config = synthetic_config("dp", 3, 8);
  config.comm.timeout_s = 0.25;
  const gradsync::StrategyOptions options = gradsync::strategy_options(config);
  CHECK(options.timeout == std::chrono::milliseconds(250));
  CHECK(options.workers == 3);
  CHECK(options.sgd.lr == config.train.lr);
  // And the group made from them gives up after that long, naming who never came.
  auto replicas = gradsync::make_strategies(options);
  std::vector<float> params(4, 0.f);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(replicas[0]->init(params), gradsync::TimeoutError);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));  // not 60 s
}

TEST_CASE("dp: replicas that time out while replica 0 still works leave it live buffers") {
  // Replica 0 waits on the emulated link for the others' gradients (284 042 floats, 1.1 MB,
  // at 0.01 Gbit/s less the link's 256 KiB burst: about 0.7 s) before it reads them and writes
  // their parameters; the others give up after 0.2 s. Their models must outlive replica 0's
  // work on them: freeing them at once made replica 0 read and write freed memory (a crash, or
  // an AddressSanitizer report).
  gradsync::Config config = synthetic_config("dp", 2, 8);
  config.model.hidden = {512, 512};
  config.train.steps = 3;
  config.comm.timeout_s = 0.2;
  config.network.link_gbps = 0.01;
  gradsync::LoopOptions loop;
  loop.steps = config.train.steps;
  std::string error;
  try {
    gradsync::train_in_process(config, gradsync::testing::synthetic_data(), loop, {}, {});
  } catch (const gradsync::TimeoutError& e) {
    error = e.what();
  }
  // The first to fail is named: replica 1, which waited for replica 0 (busy on the link).
  CHECK(error.find("replica 1 waited 200 ms for replica(s) 0") != std::string::npos);
}
