// The memory estimate's arithmetic in closed form for each strategy, its one-line refusal, and
// that it lets every shipped preset through on an ordinary machine.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "experiments/memory_estimate.h"
#include "experiments/preset.h"
#include "experiments/sweep.h"
#include "tests/support/preset_text.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;
using testing::load;

constexpr double kGiB = 1024.0 * 1024 * 1024;

// An MLP of widths {4, 3, 2}: 4*3 + 3 weights and biases into the hidden layer, 3*2 + 2 out of
// it, 23 parameters; 16 samples of 4 features and a label.
Config small(const std::string& strategy, int workers) {
  Config c;
  c.name = "small";
  c.strategy = strategy;
  c.workers = workers;
  c.train.batch = 5;
  c.model.hidden = {3};
  return c;
}
constexpr DataShape kSmallData{10, 6, 4, 2};
constexpr double kParams = 23;
constexpr double kP = kParams * 4;                    // bytes of one copy of the parameters
constexpr double kActivations = 5 * (4 + 6 + 4) * 4;  // batch x (input + 2 x hidden + 2 x out)
constexpr double kData = 16 * (4 * 4 + 4);            // features and a label per sample

}  // namespace

TEST_CASE("preset memory: the estimate for each strategy, in closed form") {
  SUBCASE("single: parameters, gradients and momentum; one replica") {
    const MemoryEstimate e = estimate_memory(small("single", 1), kSmallData);
    CHECK(e.parameters == kParams);
    CHECK(e.model_bytes == 3 * kP);
    CHECK(e.activation_bytes == kActivations);
    CHECK(e.data_bytes == kData);
    CHECK(e.processes == 1);
    CHECK(e.total() == 3 * kP + kActivations + kData);
  }
  SUBCASE("dp: every replica in one process, momentum on replica 0, one copy of the data") {
    const MemoryEstimate e = estimate_memory(small("dp", 3), kSmallData);
    CHECK(e.model_bytes == (2 * 3 + 1) * kP);
    CHECK(e.activation_bytes == 3 * kActivations);
    CHECK(e.data_bytes == kData);
    CHECK(e.processes == 1);
  }
  SUBCASE("allreduce: a process per rank, each with its own optimizer and data") {
    const MemoryEstimate e = estimate_memory(small("allreduce", 3), kSmallData);
    CHECK(e.model_bytes == 3 * 3 * kP);
    CHECK(e.activation_bytes == 3 * kActivations);
    CHECK(e.data_bytes == 3 * kData);
    CHECK(e.processes == 3);
  }
  SUBCASE("ps: workers without an optimizer, the shards holding parameters and momentum") {
    Config c = small("ps", 3);
    c.ps.servers = 2;
    const MemoryEstimate e = estimate_memory(c, kSmallData);
    CHECK(e.model_bytes == (2 * 3 + 2) * kP);
    CHECK(e.data_bytes == 3 * kData);
    CHECK(e.processes == 5);
  }
  SUBCASE("gpu: the replicas live on the device; the data and ps' shards stay on the host") {
    Config ring = small("allreduce", 3);
    ring.device = "gpu";
    const MemoryEstimate e = estimate_memory(ring, kSmallData);
    CHECK(e.model_bytes == 0);
    CHECK(e.activation_bytes == 0);
    CHECK(e.data_bytes == 3 * kData);
    Config ps = small("ps", 3);
    ps.device = "gpu";
    CHECK(estimate_memory(ps, kSmallData).model_bytes == 2 * kP);
  }
  SUBCASE("the synthetic model: parameters and gradients, no activations") {
    Config c = small("single", 1);
    c.model.kind = "synthetic";
    c.model.parameters = 1000;
    const MemoryEstimate e = estimate_memory(c, kSmallData);
    CHECK(e.model_bytes == 3 * 1000 * 4);
    CHECK(e.activation_bytes == 0);
  }
}

TEST_CASE("preset memory: the data's shape from its keys, or unknown until loaded") {
  DataConfig synthetic;
  synthetic.kind = "synthetic";
  synthetic.train_samples = 100;
  synthetic.test_samples = 20;
  synthetic.dim = 7;
  synthetic.classes = 3;
  const DataShape s = data_shape(synthetic);
  CHECK(s.train_samples == 100);
  CHECK(s.test_samples == 20);
  CHECK(s.dim == 7);
  CHECK(s.classes == 3);
  // Files: nothing known, and the estimate from that is no more than from any real shape.
  const DataShape files = data_shape(DataConfig{});
  CHECK(files.train_samples == 0);
  const Config c = small("allreduce", 2);
  CHECK(estimate_memory(c, files).total() < estimate_memory(c, kSmallData).total());
}

TEST_CASE("preset memory: a model that cannot fit is refused in one line naming the key") {
  Config c = load("data: {kind: synthetic}\nmodel: {hidden: [100000, 100000]}\n").runs[0];
  const MemoryEstimate e = estimate_memory(c, data_shape(c.data));
  CHECK(e.parameters > 1e10);    // the 100000 x 100000 layer alone
  CHECK(e.total() > 12 * 1e10);  // 4 bytes each of parameters, gradients and momentum
  std::string message;
  try {
    check_memory(c, data_shape(c.data), 23 * kGiB);
  } catch (const ConfigError& error) {
    message = error.what();
    CHECK(error.where() == "single-1");
    CHECK(error.key() == "model.hidden");
  }
  CHECK(
      message.starts_with("single-1: model.hidden: [100000, 100000] needs about 112 GiB of "
                          "memory (parameters, gradients and momentum 112 GiB, activations "));
  CHECK(message.ends_with("; 1 process); this machine has 23 GiB available"));
  CHECK(message.find('\n') == std::string::npos);
  // Where the available memory is unknown nothing is refused; where it is enough, neither.
  CHECK_NOTHROW(check_memory(c, data_shape(c.data), std::nullopt));
  CHECK_NOTHROW(check_memory(c, data_shape(c.data), e.total()));
}

TEST_CASE("preset memory: the refusal names what drives the estimate") {
  auto key_of = [](const Config& c) -> std::string {
    try {
      check_memory(c, data_shape(c.data), 1 * kGiB);
    } catch (const ConfigError& e) {
      return e.key();
    }
    return "";
  };
  const std::string synthetic = "data: {kind: synthetic}\n";
  CHECK(key_of(load(synthetic + "model: {hidden: [100000]}\ntrain: {batch: 65536}\n").runs[0]) ==
        "train.batch");
  CHECK(key_of(load("data: {kind: synthetic, train_samples: 1000000000, dim: 1000}\n").runs[0]) ==
        "data.train_samples");
  CHECK(key_of(load(synthetic + "model: {kind: synthetic, parameters: 1000000000}\n").runs[0]) ==
        "model.parameters");
  // Four ranks of a model that fits once do not fit four times.
  const std::string quarter = synthetic + "model: {kind: synthetic, parameters: 50000000}\n";
  CHECK(key_of(load(quarter).runs[0]).empty());  // 600 MB
  CHECK(key_of(load(quarter + "strategy: allreduce\nworkers: 4\n").runs[0]) == "model.parameters");
}

TEST_CASE("preset memory: bytes in binary units, MemAvailable from /proc/meminfo") {
  CHECK(bytes_text(512) == "512 B");
  CHECK(bytes_text(1536) == "1.5 KiB");
  CHECK(bytes_text(120 * kGiB) == "120 GiB");
  CHECK(bytes_text(3.5 * 1024 * kGiB) == "3.5 TiB");
  CHECK(parse_mem_available("MemTotal:       32000000 kB\nMemFree:  100 kB\n"
                            "MemAvailable:   23786100 kB\nBuffers: 1 kB\n") == 23786100.0 * 1024);
  CHECK(parse_mem_available("MemTotal:       32000000 kB\n") == std::nullopt);
  CHECK(parse_mem_available("MemAvailable: lots\n") == std::nullopt);
}

TEST_CASE("preset memory: every shipped preset fits an 8 GiB machine, at every sweep point") {
  // Fashion-MNIST as Debian ships it: 60000 + 10000 images of 28 x 28, 10 classes.
  const DataShape fashion{60000, 10000, 784, 10};
  const fs::path shipped = fs::path(GRADSYNC_SOURCE_DIR) / "experiments" / "presets";
  int runs = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(shipped)) {
    if (entry.path().extension() != ".yaml") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    Preset preset = load_preset_text(text.str(), entry.path().string(), {}, PresetUse::kToRead);
    if (!preset.runs.front().sweep.workers.empty()) preset.runs = expand_sweep(preset);
    for (const Config& config : preset.runs) {
      CAPTURE(entry.path().filename().string());
      CAPTURE(config.name);
      const DataShape shape = config.data.kind == "synthetic" ? data_shape(config.data) : fashion;
      CHECK(estimate_memory(config, shape).total() > 0);
      CHECK_NOTHROW(check_memory(config, shape, 8 * kGiB));
      ++runs;
    }
  }
  CHECK(runs >= 40);  // the presets were found and read
}

}  // namespace gradsync
