// Where there is no GPU (or the build has no CUDA / NCCL), every GPU entry point refuses with
// one clear line naming the key or the device, instead of crashing or running on the CPU.
// Built in every configuration; on a machine with GPUs the refusals do not apply and the
// cases say so.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "allreduce/in_memory_store.h"
#include "allreduce/make_communicator.h"
#include "bench/collective_bench.h"
#include "bench/mlp_throughput.h"
#include "common/error.h"
#include "experiments/run_experiment.h"
#include "model/mlp.h"
#include "strategies/make_strategy.h"
#include "strategies/ps/host_staged_strategy.h"
#include "strategies/single_strategy.h"
#include "tests/support/temp_dir.h"
#include "worker/model_factory.h"

namespace {

bool one_line(const std::string& text) { return text.find('\n') == std::string::npos; }

template <typename F>
std::string config_error_of(F&& f) {
  try {
    f();
  } catch (const gradsync::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("gpu refusals: device gpu without CUDA or without a GPU is a one-line ConfigError") {
  if (gradsync::visible_gpus() > 0) {
    MESSAGE("skipped: a GPU is visible, so device: gpu is available here");
    return;
  }
  gradsync::Config config;
  config.name = "presets/x.yaml";
  config.device = "gpu";
  const std::string error = config_error_of([&] { gradsync::make_model(config, {4, 3}, 8); });
  MESSAGE("device: gpu -> " << error);
  REQUIRE(!error.empty());
  CHECK(one_line(error));
  CHECK(error.find("presets/x.yaml: device:") == 0);
  if (gradsync::gpu_compiled_in()) {
    CHECK(error.find("no CUDA device is visible") != std::string::npos);
  } else {
    CHECK(error.find("not available in this build") != std::string::npos);
  }
  // An explicit ordinal changes nothing about the refusal.
  CHECK(config_error_of([&] { gradsync::make_model(config, {4, 3}, 8, 3); }) == error);
  // And cpu still builds the host MLP.
  config.device = "cpu";
  CHECK(gradsync::make_model(config, {4, 3}, 8)->device() == -1);
}

namespace {

// Sets environment variables for one scope, then puts back what was there.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::map<std::string, std::string> vars) {
    for (const auto& [name, value] : vars) {
      const char* before = std::getenv(name.c_str());
      saved_[name] = before ? std::optional<std::string>(before) : std::nullopt;
      ::setenv(name.c_str(), value.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, before] : saved_) {
      if (before) {
        ::setenv(name.c_str(), before->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

}  // namespace

TEST_CASE("gpu refusals: model_device follows dp replicas and LOCAL_RANK") {
  gradsync::Config config;
  CHECK(gradsync::model_device(config) == -1);
  config.device = "gpu";
  config.strategy = "dp";
  CHECK(gradsync::model_device(config, 2) == 2);
  // One process per GPU: LOCAL_RANK names it, unless the launcher left only one visible.
  config.strategy = "allreduce";
  const ScopedEnv env({{"RANK", "3"},
                       {"WORLD_SIZE", "4"},
                       {"LOCAL_RANK", "3"},
                       {"MASTER_ADDR", "127.0.0.1"},
                       {"MASTER_PORT", "29500"}});
  CHECK(gradsync::model_device(config) == (gradsync::visible_gpus() == 1 ? 0 : 3));
}

TEST_CASE("gpu refusals: dp on gpu needs NCCL and one GPU per replica") {
  gradsync::StrategyOptions options;
  options.name = "dp";
  options.workers = 2;
  options.device = 0;
  if (gradsync::visible_gpus() >= 2) {
    MESSAGE("skipped: 2 GPUs are visible, so dp on gpu is available here");
    return;
  }
  const std::string error = config_error_of([&] { gradsync::make_strategies(options); });
  MESSAGE("dp on gpu -> " << error);
  CHECK(error.find("strategy: device: ") == 0);
  CHECK(one_line(error));
}

TEST_CASE("gpu refusals: bench --device gpu without NCCL or a GPU") {
  if (gradsync::visible_gpus() > 0) {
    MESSAGE("skipped: a GPU is visible");
    return;
  }
  gradsync::CollectiveBenchOptions collective;
  collective.device = "gpu";
  const std::string allreduce =
      config_error_of([&] { gradsync::run_collective_bench(collective); });
  MESSAGE("bench allreduce --device gpu -> " << allreduce);
  CHECK(allreduce.find("bench: --device: gpu") == 0);
  CHECK(one_line(allreduce));

  gradsync::MlpBenchOptions mlp;
  mlp.device = "gpu";
  const std::string throughput = config_error_of([&] { gradsync::run_mlp_bench(mlp); });
  MESSAGE("bench mlp --device gpu -> " << throughput);
  CHECK(throughput.find("bench: --device: gpu") == 0);
  CHECK(one_line(throughput));
}

TEST_CASE("gpu refusals: a communicator for a device needs NCCL and that device") {
  if (gradsync::visible_gpus() > 0) {
    MESSAGE("skipped: a GPU is visible");
    return;
  }
  gradsync::InMemoryStore store;
  gradsync::CommunicatorOptions options;
  options.device = 0;
  std::string error;
  try {
    gradsync::make_communicator(store, 0, 1, options);
  } catch (const gradsync::Error& e) {
    error = e.what();
  }
  MESSAGE("communicator on cuda:0 -> " << error);
  CHECK(!error.empty());
  CHECK(one_line(error));
  CHECK(error.find(gradsync::nccl_compiled_in() ? "no CUDA device is visible"
                                                : "built without NCCL") != std::string::npos);
}

TEST_CASE("gpu refusals: host models keep their strategy unwrapped") {
  gradsync::Mlp model({4, 3}, 2);
  auto strategy = std::make_unique<gradsync::SingleStrategy>(gradsync::SgdOptions{});
  const gradsync::SyncStrategy* before = strategy.get();
  CHECK(gradsync::adapt_to_model_device(std::move(strategy), model).get() == before);
}

TEST_CASE("gpu refusals: make_model without a device ordinal never builds a GPU model") {
  // A caller that does not choose a device has not prepared its strategy for device buffers.
  if (gradsync::visible_gpus() == 0) {
    MESSAGE("skipped: no GPU visible (the case above covers the refusal here)");
    return;
  }
  gradsync::Config config;
  config.device = "gpu";
  const std::string error = config_error_of([&] { gradsync::make_model(config, {4, 3}, 8); });
  CHECK(error.find("does not place models on GPUs") != std::string::npos);
  CHECK(gradsync::make_model(config, {4, 3}, 8, 0)->device() == 0);
}

TEST_CASE("gpu refusals: a preset this machine cannot run leaves no results folder behind") {
  if (gradsync::visible_gpus() > 0) {
    MESSAGE("skipped: a GPU is visible, so device: gpu is available here");
    return;
  }
  // A cpu run first and the gpu run second: the refusal comes before either starts, so neither
  // a folder nor a `latest` link pointing at a run that never happened is left.
  gradsync::testing::TempDir dir;
  gradsync::Config cpu;
  cpu.name = "cpu-run";
  gradsync::Config gpu = cpu;
  gpu.name = "gpu-run";
  gpu.strategy = "dp";
  gpu.workers = 2;
  gpu.device = "gpu";
  const gradsync::Preset preset{"gpu-preset", "gpu-preset.yaml", {cpu, gpu}};
  const std::string out = dir.file("results");
  const std::string error = config_error_of([&] { gradsync::run_preset(preset, out); });
  CHECK(error.find("gpu-run: device: ") == 0);
  CHECK(one_line(error));
  CHECK(!std::filesystem::exists(out));
}
