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
#include "gpu_test_support.h"
#include "model/mlp.h"
#include "strategies/make_strategy.h"
#include "strategies/ps/host_staged_strategy.h"
#include "strategies/single_strategy.h"
#include "tests/support/preset_text.h"
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
  const int visible = gradsync::visible_gpus();
  CHECK(gradsync::model_device(config) == (visible == 1 ? 0 : 3));
  // Host-staged workers share the GPUs there are: LOCAL_RANK 3 of ps on 2 GPUs takes GPU 1.
  config.strategy = "ps";
  CHECK(gradsync::model_device(config) == (visible == 0 ? 3 : 3 % visible));
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
  GRADSYNC_SKIP_WITHOUT_GPUS(1);  // without one, the first case covers the refusal
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

TEST_CASE("gpu refusals: NCCL is what reduces dp and allreduce on gpu, unless a host backend") {
  gradsync::Config config;
  config.strategy = "allreduce";
  CHECK_FALSE(gradsync::reduces_over_nccl(config));  // device: cpu
  config.device = "gpu";
  CHECK(gradsync::reduces_over_nccl(config));  // comm.backend auto: nccl for device buffers
  config.comm.backend = "nccl";
  CHECK(gradsync::reduces_over_nccl(config));
  for (const char* host : {"tcp", "gloo"}) {
    config.comm.backend = host;
    CHECK_FALSE(gradsync::reduces_over_nccl(config));
  }
  config.comm.backend = "auto";
  config.strategy = "dp";
  CHECK(gradsync::reduces_over_nccl(config));
  config.strategy = "ps";
  CHECK_FALSE(gradsync::reduces_over_nccl(config));
}

TEST_CASE("gpu refusals: allreduce over NCCL needs a GPU per rank on each host") {
  gradsync::Config config;
  config.name = "presets/x.yaml";
  config.strategy = "allreduce";
  config.device = "gpu";
  config.workers = 4;
  // Two ranks on one GPU would fail inside ncclCommInitRank ("Duplicate GPU detected").
  const std::string error = config_error_of([&] { gradsync::check_gpu_per_rank(config, 2, 1); });
  MESSAGE("allreduce, 2 ranks on 1 GPU -> " << error);
  CHECK(error.find("presets/x.yaml: workers: ") == 0);
  CHECK(error.find("2 ranks on this host but 1 CUDA device(s)") != std::string::npos);
  CHECK(one_line(error));
  config.comm.backend = "nccl";
  CHECK(!config_error_of([&] { gradsync::check_gpu_per_rank(config, 4, 2); }).empty());
  // Ranks of several hosts: only those on this one count against its GPUs.
  CHECK_NOTHROW(gradsync::check_gpu_per_rank(config, 2, 2));
  CHECK_NOTHROW(gradsync::check_gpu_per_rank(config, 1, 1));
  // Host-staged workers may share one GPU: ps, and allreduce over tcp or gloo.
  config.strategy = "ps";
  CHECK_NOTHROW(gradsync::check_gpu_per_rank(config, 4, 1));
  config.strategy = "allreduce";
  config.comm.backend = "tcp";
  CHECK_NOTHROW(gradsync::check_gpu_per_rank(config, 4, 1));
  // On the CPU nothing is counted.
  config.comm.backend = "auto";
  config.device = "cpu";
  CHECK_NOTHROW(gradsync::check_gpu_per_rank(config, 4, 0));
}

TEST_CASE("gpu refusals: `gradsync run` refuses more NCCL ranks than GPUs, lets ps share them") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);  // without one, every gpu run is refused before the count
  const int visible = gradsync::visible_gpus();
  gradsync::Config config;
  config.name = "over";
  config.device = "gpu";
  config.strategy = "allreduce";
  config.workers = visible + 1;
  const std::string error = config_error_of([&] { gradsync::check_device_available(config); });
  MESSAGE("allreduce with " << visible + 1 << " workers -> " << error);
  CHECK(error.find("over: workers: allreduce on gpu reduces over NCCL") == 0);
  config.workers = visible;
  CHECK_NOTHROW(gradsync::check_device_available(config));
  config.strategy = "ps";
  config.workers = visible + 1;
  CHECK_NOTHROW(gradsync::check_device_available(config));
}

TEST_CASE("gpu refusals: link emulation with NCCL is refused, naming the key") {
  using gradsync::testing::error_of;
  using gradsync::testing::load;
  const std::string gpu = "device: gpu\nworkers: 2\ndata: {kind: synthetic}\n";
  // NCCL reduces over NVLink, PCIe or shared memory: neither key would shape its bytes.
  CHECK(error_of(gpu + "strategy: allreduce\nnetwork: {link_gbps: 10}\n") ==
        "presets/x.yaml:5: network.link_gbps: allreduce on gpu reduces over NCCL, which bypasses "
        "gradsync's emulated link (network.link_gbps, network.namespaces): drop them, or use "
        "device: cpu or ps on gpu");
  CHECK(error_of(gpu + "strategy: allreduce\ncomm: {backend: nccl}\nnetwork: {namespaces: true}\n")
            .starts_with("presets/x.yaml:6: network.namespaces: allreduce on gpu reduces over "
                         "NCCL"));
  CHECK(error_of(gpu + "strategy: dp\nnetwork: {link_gbps: 1}\n")
            .starts_with("presets/x.yaml:5: network.link_gbps: dp on gpu reduces over NCCL"));
  // Host-staged GPU workers go through gradsync's sockets, and the link shapes them.
  CHECK_NOTHROW(load(gpu + "strategy: ps\nnetwork: {link_gbps: 1}\n"));
  // On the CPU the ring paces itself.
  CHECK_NOTHROW(
      load("strategy: allreduce\nworkers: 2\ndata: {kind: synthetic}\n"
           "network: {link_gbps: 1}\n"));
}

TEST_CASE("gpu refusals: a GPU test skips only where no GPU is, and fails where one should be") {
  using gradsync::testing::gpu_gate;
  using Gate = gradsync::testing::GpuGate;
  const auto none = [] { return 0; };
  const auto one = [] { return 1; };
  CHECK(gpu_gate(1, one, 0).action == Gate::kRun);
  CHECK(gpu_gate(1, none, 0).action == Gate::kSkip);
  CHECK(gpu_gate(1, none, 0).message == "skipped: needs 1 CUDA device(s), 0 visible");
  // GRADSYNC_REQUIRE_GPU=1: no GPU is a failure, not a pass ...
  CHECK(gpu_gate(1, none, 1).action == Gate::kFail);
  CHECK(gpu_gate(1, none, 1).message ==
        "GRADSYNC_REQUIRE_GPU=1 but this test needs 1 CUDA device(s), 0 visible");
  // ... while a two-GPU test on a one-GPU machine still skips.
  CHECK(gpu_gate(2, one, 1).action == Gate::kSkip);
  // A GPU that is there but unusable (a driver too old) fails with the reason, required or not.
  const auto unusable = []() -> int {
    throw gradsync::Error("CUDA devices are present but cannot be used: too old");
  };
  const Gate gate = gpu_gate(1, unusable, 0);
  CHECK(gate.action == Gate::kFail);
  CHECK(gate.message.find("too old") != std::string::npos);
}
