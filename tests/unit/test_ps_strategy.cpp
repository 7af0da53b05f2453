#include <doctest/doctest.h>

#include <thread>

#include "model/mlp.h"
#include "model/sampler.h"
#include "model/synthetic_data.h"
#include "server/local_endpoint.h"
#include "server/ps_shard.h"
#include "strategies/ps/ps_strategy.h"
#include "tests/support/compare.h"
#include "tests/support/training.h"
#include "worker/in_process.h"
#include "worker/worker_loop.h"

namespace {

const gradsync::TrainTest& data() { return gradsync::testing::synthetic_data(); }

const std::vector<int> kWidths = {32, 64, 32, 10};
const gradsync::SgdOptions kSgd{0.05, 0.9, 1e-4};

// K shards on threads, N workers on threads, each worker with its own model, sampler and
// PsStrategy over real ZeroMQ sockets on loopback: `gradsync server` and `gradsync worker`
// minus the processes. Returns rank 0's final parameters.
// With `ipc`, the shards also listen on their ipc addresses and the workers go there
// (server/local_endpoint.h), as under gradsync run.
// `compression`: comm.compression on the pushes (strategies/ps/push_encoder.h).
std::vector<float> train_ps(int shards, int workers, int batch, std::int64_t steps,
                            bool ipc = false, const gradsync::PushCompression& compression = {}) {
  const std::size_t model_size = gradsync::Mlp(kWidths, 1).param_count();
  std::vector<std::unique_ptr<gradsync::PsShard>> servers;
  std::vector<std::string> endpoints;
  for (int k = 0; k < shards; ++k) {
    gradsync::PsShardOptions options;
    options.shard = k;
    options.shards = shards;
    options.world_size = workers;
    options.model_size = model_size;
    options.mode = gradsync::PsShardOptions::Mode::kSync;
    options.sgd = kSgd;
    options.timeout = std::chrono::milliseconds(20000);
    options.bind_ipc = ipc;
    servers.push_back(std::make_unique<gradsync::PsShard>(options));
    endpoints.push_back(servers.back()->endpoint());
  }
  std::vector<std::string> errors(static_cast<std::size_t>(shards + workers));
  std::vector<std::vector<float>> params(static_cast<std::size_t>(workers));
  {
    std::vector<std::jthread> threads;
    for (int k = 0; k < shards; ++k) {
      threads.emplace_back([&, k] {
        try {
          servers[k]->serve();
        } catch (const std::exception& e) {
          errors[workers + k] = e.what();
        }
      });
    }
    for (int r = 0; r < workers; ++r) {
      threads.emplace_back([&, r] {
        try {
          gradsync::PsClientOptions client;
          client.rank = r;
          client.world_size = workers;
          client.endpoints = endpoints;
          client.same_host_ipc = ipc;
          client.timeout = std::chrono::milliseconds(20000);
          client.compression = compression;
          gradsync::PsStrategy strategy(client);
          gradsync::Mlp model(kWidths, batch);
          model.init_params(1 + static_cast<std::uint64_t>(r));  // init must make them equal
          gradsync::DistributedSampler sampler(data().train.size, r, workers, batch, 1);
          gradsync::LoopOptions loop;
          loop.steps = steps;
          loop.keep_params = true;
          params[r] =
              gradsync::run_worker_loop(model, strategy, sampler, data(), loop, {}).final_params;
        } catch (const std::exception& e) {
          errors[r] = e.what();
          for (auto& s : servers) s->stop();
        }
      });
    }
  }
  for (std::size_t i = 0; i < errors.size(); ++i) REQUIRE_MESSAGE(errors[i].empty(), errors[i]);
  for (const auto& p : params) CHECK(p == params.front());
  return params.front();
}

std::vector<float> train_single(int batch, std::int64_t steps) {
  return gradsync::testing::train_single({64, 32}, batch, steps, kSgd);
}

}  // namespace

TEST_CASE("ps strategy: sync mode follows `single` on the global batch for 50 steps") {
  const gradsync::Mlp shape(kWidths, 1);
  const auto& layers = shape.layers();
  for (int shards : {1, 2}) {
    for (int workers : {1, 2, 4}) {
      CAPTURE(shards);
      CAPTURE(workers);
      const auto ps = train_ps(shards, workers, 16, 50);
      const auto single = train_single(16 * workers, 50);
      const double diff = gradsync::testing::max_relative_difference(ps, single, layers);
      MESSAGE("ps sync K=" << shards << " N=" << workers << " vs single: " << diff);
      CHECK(diff <= 1e-5);
    }
  }
}

TEST_CASE("ps strategy: workers of the shard's host go through ipc, with the same trajectory") {
  CHECK(gradsync::same_host_endpoint("tcp://127.0.0.1:5555") == "ipc://@gradsync-shard-5555");
  CHECK(gradsync::same_host_endpoint("tcp://[::1]:5556") == "ipc://@gradsync-shard-5556");
  CHECK(gradsync::same_host_endpoint("tcp://10.0.0.2:5555") == "tcp://10.0.0.2:5555");
  CHECK(gradsync::same_host_endpoint("tcp://127.0.0.1:x") == "tcp://127.0.0.1:x");
  const gradsync::Mlp shape(kWidths, 1);
  const auto ps = train_ps(2, 2, 16, 30, true);
  const double diff =
      gradsync::testing::max_relative_difference(ps, train_single(32, 30), shape.layers());
  MESSAGE("ps sync over ipc, K=2 N=2 vs single: " << diff);
  CHECK(diff <= 1e-5);
}

TEST_CASE("ps strategy: compressed pushes: fp16 and bf16 near the fp32 run, top-k ratio 1 on it") {
  const gradsync::Mlp shape(kWidths, 1);
  const auto& layers = shape.layers();
  const auto none = train_ps(2, 2, 16, 50);
  // Top-k at ratio 1 sends every entry in fp32 with a zero residual: the shards apply the same
  // gradients (within 1e-6: the bound, allowing for summation order).
  const auto top_k = train_ps(2, 2, 16, 50, false, {"topk", 1.0, 0});
  const double top_k_diff = gradsync::testing::max_relative_difference(top_k, none, layers);
  MESSAGE("ps topk ratio 1 vs none, K=2 N=2, 50 steps: " << top_k_diff);
  CHECK(top_k_diff <= 1e-6);
  // fp16 rounds each pushed gradient entry to 11 significant bits (relative 2^-11 ~ 4.9e-4),
  // while the parameters and the shards' sums stay fp32. One step's rounding moves a weight by
  // at most lr * |g| * 2^-11: measured 9e-6 of a tensor's scale after step 1 (against 4e-8 for
  // ps vs single, summation order alone). Training carries each rounding on (momentum 0.9 keeps
  // it ~10 steps) and the trajectory amplifies the difference: measured 1.4e-4 after 10 steps,
  // 2.6e-3 after 50. The bound, 1e-2, leaves 4x for other CPUs' float paths (the model's Eigen
  // kernels). bf16, 3 bits coarser, must land farther (measured 1.3e-2, bound 5e-2): the pushes
  // really are rounded to the format they name, and the finer one follows closer.
  const auto fp16 = train_ps(2, 2, 16, 50, false, {"fp16", 0.01, 0});
  const auto bf16 = train_ps(2, 2, 16, 50, false, {"bf16", 0.01, 0});
  const double fp16_diff = gradsync::testing::max_relative_difference(fp16, none, layers);
  const double bf16_diff = gradsync::testing::max_relative_difference(bf16, none, layers);
  MESSAGE("ps vs none, K=2 N=2, 50 steps: fp16 " << fp16_diff << ", bf16 " << bf16_diff);
  CHECK(fp16_diff <= 1e-2);
  CHECK(bf16_diff <= 5e-2);
  CHECK(fp16_diff < bf16_diff / 2);
  CHECK(fp16_diff > 0);  // it did round
}
