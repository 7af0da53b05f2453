// Preset loading: layering (defaults <- top level <- runs entry <- --set), files on disk,
// to_yaml round trips, describe_keys and the shipped presets. Most tests use synthetic data so
// that no data directory is needed. The one-line errors: test_preset_errors.cpp.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "experiments/preset.h"
#include "experiments/sweep.h"
#include "tests/support/preset_text.h"
#include "tests/support/temp_dir.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::kFile;
using testing::kSynthetic;
using testing::load;
using testing::TempDir;

}  // namespace

TEST_CASE("preset: an almost empty preset gives the defaults") {
  const Preset preset = load(kSynthetic);
  REQUIRE(preset.runs.size() == 1);
  CHECK(preset.name == "x");
  CHECK(preset.path == kFile);
  const Config& c = preset.runs[0];
  const Config defaults;
  CHECK(c.name == "single-1");
  CHECK(c.strategy == defaults.strategy);
  CHECK(c.workers == defaults.workers);
  CHECK(c.train.lr == defaults.train.lr);
  CHECK(c.train.batch == defaults.train.batch);
  CHECK(c.train.seed == defaults.train.seed);
  CHECK(c.model.hidden == defaults.model.hidden);
  CHECK(c.output.progress == defaults.output.progress);
  CHECK(c.data.dir.empty());  // synthetic data needs no directory

  // An empty document is valid too; here --set supplies the data kind.
  CHECK(load("", {"data.kind=synthetic"}).runs[0].train.epochs == defaults.train.epochs);
}

TEST_CASE("preset: nested keys override their defaults only") {
  const Config c = load(R"(
strategy: dp
workers: 4
train:
  lr: 0.1
  batch: 32
  momentum: 0
  seed: 18446744073709551615
data: {kind: synthetic, dim: 8, classes: 3}
model:
  hidden:
    - 128
    - 64
output: {progress: plain}
)")
                       .runs[0];
  CHECK(c.name == "dp-4");
  CHECK(c.train.lr == 0.1);
  CHECK(c.train.batch == 32);
  CHECK(c.train.momentum == 0.0);
  CHECK(c.train.seed == 18446744073709551615ull);
  CHECK(c.train.epochs == Config().train.epochs);
  CHECK(c.data.dim == 8);
  CHECK(c.data.classes == 3);
  CHECK(c.data.train_samples == Config().data.train_samples);
  CHECK(c.model.hidden == std::vector<int>{128, 64});
  CHECK(c.output.progress == "plain");
}

TEST_CASE("preset: runs inherit the top level and name themselves") {
  const Preset preset = load(R"(
data: {kind: synthetic}
train: {lr: 0.1, batch: 16}
runs:
  - name: baseline
  - strategy: dp
    workers: 4
    train: {lr: 0.2}
  - {strategy: dp, workers: 2, model: {hidden: []}}
)");
  REQUIRE(preset.runs.size() == 3);
  CHECK(preset.runs[0].name == "baseline");
  CHECK(preset.runs[0].strategy == "single");
  CHECK(preset.runs[0].train.lr == 0.1);
  CHECK(preset.runs[1].name == "dp-4");
  CHECK(preset.runs[1].workers == 4);
  CHECK(preset.runs[1].train.lr == 0.2);
  CHECK(preset.runs[1].train.batch == 16);  // from the top level
  CHECK(preset.runs[2].name == "dp-2");
  CHECK(preset.runs[2].model.hidden.empty());
  CHECK(preset.runs[2].train.lr == 0.1);
}

TEST_CASE("preset: --set overrides every run, in order") {
  const std::string yaml = R"(
data: {kind: synthetic}
train: {lr: 0.1}
runs:
  - {name: a, train: {lr: 0.2}}
  - {name: b, strategy: dp, workers: 2}
)";
  const Preset preset = load(
      yaml, {"train.lr=0.3", "model.hidden=64,32", "train.batch=8", "train.batch=9", "data.dir="});
  for (const Config& c : preset.runs) {
    CHECK(c.train.lr == 0.3);
    CHECK(c.model.hidden == std::vector<int>{64, 32});
    CHECK(c.train.batch == 9);  // the later --set wins
  }
  CHECK(preset.runs[1].workers == 2);
  CHECK(load(yaml, {"model.hidden=[256, 128]"}).runs[0].model.hidden == std::vector<int>{256, 128});
  CHECK(load(yaml, {" train.epochs = 3"}).runs[0].train.epochs == 3);
  // Derived names follow --set, so forcing every run onto one strategy can collide.
  CHECK(load("data: {kind: synthetic}\nruns: [{strategy: dp}, {workers: 3}]\n", {"strategy=dp"})
            .runs[1]
            .name == "dp-3");
}

TEST_CASE("preset: --only chooses the runs before their combinations of keys are checked") {
  const std::string yaml = R"(
strategy: allreduce
data: {kind: synthetic}
runs:
  - {name: tcp-2, workers: 2, comm: {backend: tcp}}
  - {name: gloo-2, workers: 2, comm: {backend: gloo, algorithm: ring}}
)";
  const std::vector<std::string> sets = {"comm.algorithm=halving_doubling"};
  // An algorithm is gloo's alone: over every run it is refused for tcp-2 ...
  CHECK(error_of(yaml, sets) ==
        "--set: comm.algorithm: 'halving_doubling' is gloo's; tcp takes "
        "only default");
  // ... but meant for the gloo run --only picks, it loads, and --set wins over the entry.
  const Preset picked = load_preset_text(yaml, kFile, sets, PresetUse::kToRun, {"gloo-2"});
  REQUIRE(picked.runs.size() == 1);
  CHECK(picked.runs[0].name == "gloo-2");
  CHECK(picked.runs[0].comm.algorithm == "halving_doubling");
  // A name no run has is one line naming --only; a duplicate is found among all runs.
  CHECK_THROWS_WITH_AS(load_preset_text(yaml, kFile, {}, PresetUse::kToRun, {"mpi-2"}),
                       "presets/x.yaml: --only: no run of the preset has that name (runs: tcp-2, "
                       "gloo-2)",
                       ConfigError);
  CHECK_THROWS_WITH_AS(
      load_preset_text("data: {kind: synthetic}\nruns: [{name: a}, {name: b}, {name: b}]\n", kFile,
                       {}, PresetUse::kToRun, {"a"}),
      doctest::Contains("duplicate run name 'b'"), ConfigError);
}

TEST_CASE("preset: files on disk") {
  TempDir dir;
  const std::string presets = dir.str() + "/presets";
  fs::create_directories(presets);
  std::ofstream(presets + "/quickstart.yaml") << "data: {kind: synthetic}\ntrain: {lr: 0.2}\n";
  std::ofstream(presets + "/compare.yaml") << "data: {kind: synthetic}\n";

  CHECK(find_preset("quickstart", presets) == presets + "/quickstart.yaml");
  CHECK(find_preset(presets + "/compare.yaml", "/nope") == presets + "/compare.yaml");
  try {
    find_preset("quikstart", presets);
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) ==
          "quikstart: preset: no such file, and no shipped preset of that name (shipped: "
          "compare, quickstart)");
  }

  const Preset preset = load_preset(presets + "/quickstart.yaml", {"train.batch=4"});
  CHECK(preset.name == "quickstart");
  CHECK(preset.path == presets + "/quickstart.yaml");
  CHECK(preset.runs.at(0).train.lr == 0.2);
  CHECK(preset.runs.at(0).train.batch == 4);

  const std::string missing = presets + "/missing.yaml";
  try {
    load_preset(missing, {});
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == missing + ": preset: cannot open: no such file");
    CHECK(e.where() == missing);
    CHECK(e.key() == "preset");
  }

  // Errors inside a file name the path as given.
  std::ofstream(presets + "/bad.yaml") << "data: {kind: synthetic}\ntrain:\n  lr: fast\n";
  try {
    load_preset(presets + "/bad.yaml", {});
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(e.where() == presets + "/bad.yaml:3");
    CHECK(e.key() == "train.lr");
  }
}

TEST_CASE("preset: to_yaml round-trips through load_preset_text") {
  TempDir dir;
  const Preset preset =
      load("data: {kind: idx, dir: '" + dir.str() + "'}\nruns:\n  - name: every_key.v2\n",
           {"strategy=dp", "workers=3", "train.steps=123", "train.epochs=7", "train.batch=17",
            "train.lr=0.0123", "train.momentum=0.5", "train.weight_decay=1e-05", "train.seed=99",
            "train.eval_every=11", "train.target_accuracy=0.9", "data.train_samples=100",
            "data.test_samples=50", "data.dim=5", "data.classes=4", "model.hidden=[7, 9, 11]",
            "output.dir=\"my results: #1\"", "output.trace_steps=12", "output.progress=off"});
  const Config& original = preset.runs.at(0);
  CHECK(original.output.dir == "my results: #1");

  const std::string yaml = to_yaml(original);
  const Preset reloaded = load_preset_text(yaml, "config.yaml", {});
  REQUIRE(reloaded.runs.size() == 1);
  const Config& c = reloaded.runs[0];
  CHECK(to_yaml(c) == yaml);
  CHECK(c.name == "every_key.v2");
  CHECK(c.strategy == "dp");
  CHECK(c.workers == 3);
  CHECK(c.train.steps == 123);
  CHECK(c.train.epochs == 7);
  CHECK(c.train.batch == 17);
  CHECK(c.train.lr == 0.0123);
  CHECK(c.train.momentum == 0.5);
  CHECK(c.train.weight_decay == 1e-05);
  CHECK(c.train.seed == 99);
  CHECK(c.train.eval_every == 11);
  CHECK(c.train.target_accuracy == 0.9);
  CHECK(c.data.kind == "idx");
  CHECK(c.data.dir == dir.str());
  CHECK(c.data.train_samples == 100);
  CHECK(c.data.test_samples == 50);
  CHECK(c.data.dim == 5);
  CHECK(c.data.classes == 4);
  CHECK(c.model.hidden == std::vector<int>{7, 9, 11});
  CHECK(c.output.dir == original.output.dir);
  CHECK(c.output.trace_steps == 12);
  CHECK(c.output.progress == "off");

  // Doubles are written in their shortest exact form, so awkward values survive too.
  const Config awkward =
      load(kSynthetic, {"train.lr=0.1", "train.momentum=0.30000000000000004", "output.dir='null'",
                        "data.dir=\"a \\\"b\\\" \\\\ \\t ~\""})
          .runs[0];
  CHECK(awkward.data.dir == "a \"b\" \\ \t ~");
  const Config back = load_preset_text(to_yaml(awkward), "config.yaml", {}).runs[0];
  CHECK(back.train.momentum == awkward.train.momentum);
  CHECK(back.output.dir == "null");
  CHECK(back.data.dir == awkward.data.dir);
  CHECK(to_yaml(back) == to_yaml(awkward));
}

TEST_CASE("preset: describe_keys lists every key with its default") {
  const std::string table = describe_keys();
  // clang-format off
  const std::vector<std::string> keys = {
      "name", "strategy", "workers", "device",
      "train.steps", "train.epochs", "train.batch", "train.lr", "train.momentum",
      "train.weight_decay", "train.seed", "train.eval_every", "train.target_accuracy",
      "train.accumulation_steps", "train.lr_schedule", "train.warmup_steps", "data.kind", "data.dir", "data.train_samples", "data.test_samples", "data.dim",
      "data.classes", "data.augment", "data.crop_padding", "model.kind", "model.hidden", "model.parameters", "model.compute_ms",
      "model.layers", "model.resnet_blocks", "model.resnet_width", "model.sync_batchnorm", "comm.timeout_s", "comm.bucket_mb", "comm.overlap", "comm.uneven_inputs", "comm.broadcast_buffers",
      "comm.backend", "comm.algorithm", "comm.gloo_pairs", "comm.desync_check", "comm.hierarchical", "comm.compression", "comm.powersgd_rank", "comm.topk_ratio", "comm.compression_start_step", "zero.stage", "ps.servers", "ps.mode", "ps.staleness", "ps.continue_without_dead_workers", "ps.bind",
      "ps.curve_keys", "ps.heartbeat_s", "network.link_gbps", "network.namespaces", "network.slow_ranks", "network.slow_link_gbps", "network.hosts", "sweep.workers",
      "checkpoint.every", "checkpoint.dir", "checkpoint.resume", "output.dir", "output.trace_steps", "output.progress"};
  // clang-format on
  std::istringstream lines(table);
  std::vector<std::string> listed;
  std::string line;
  while (std::getline(lines, line)) listed.push_back(line.substr(0, line.find(' ')));
  CHECK(listed == keys);
  // --set knows every listed key (name aside: it lives in runs entries): a bad value is blamed
  // on the key's value, not reported as an unknown key.
  for (const std::string& key : keys) {
    if (key == "name") continue;
    const std::string message = error_of(kSynthetic, {key + "=[[]]"});
    CHECK_MESSAGE(message.starts_with("--set: " + key + ": "), message);
    CHECK_MESSAGE(message.find("unknown key") == std::string::npos, message);
  }
  CHECK(table.find("train.lr ") != std::string::npos);
  CHECK(table.find("0.05") != std::string::npos);
  CHECK(table.find("[256, 256]") != std::string::npos);
  CHECK(table.find("single, dp") != std::string::npos);
  // Columns line up: every line has its type column at the same offset.
  std::istringstream again(table);
  std::size_t column = std::string::npos;
  while (std::getline(again, line)) {
    const std::size_t type_at = line.find_first_not_of(' ', line.find(' '));
    if (column == std::string::npos) column = type_at;
    CHECK(type_at == column);
  }
}

TEST_CASE("preset: every shipped preset loads, and its sweep expands") {
  const fs::path shipped = fs::path(GRADSYNC_SOURCE_DIR) / "experiments" / "presets";
  int count = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(shipped)) {
    if (entry.path().extension() != ".yaml") continue;
    CAPTURE(entry.path().string());
    ++count;
    Preset preset;
    CHECK_NOTHROW(preset = load_preset(entry.path().string(), {}));
    CHECK(!preset.runs.empty());
    if (!preset.runs.empty() && !preset.runs.front().sweep.workers.empty()) {
      CHECK_NOTHROW(expand_sweep(preset));
    }
  }
  CHECK(count >= 9);  // the directory was found and read
}

}  // namespace gradsync
