// Preset errors: every bad key, shape, type, range, choice, name, data folder or --set is
// refused in one line naming the file, the line and the key, with what would be valid (the
// network, comm and zero keys' own rules: test_preset_comm_errors.cpp).
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/error.h"
#include "experiments/preset.h"
#include "tests/support/preset_text.h"
#include "tests/support/temp_dir.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::kSynthetic;
using testing::load;
using testing::TempDir;

}  // namespace

TEST_CASE("preset: unknown keys name the file, the line and the known keys") {
  CHECK(error_of("data: {kind: synthetic}\nworkerz: 2\n") ==
        "presets/x.yaml:2: workerz: unknown key (known at top level: strategy, workers, device, "
        "train, data, model, comm, zero, ps, network, sweep, checkpoint, output, runs)");
  CHECK(error_of("data: {kind: synthetic}\n\ntrain:\n  lr: 0.1\n  stpes: 3\n") ==
        "presets/x.yaml:5: train.stpes: unknown key (known in train: steps, epochs, batch, lr, "
        "momentum, weight_decay, seed, eval_every, target_accuracy, accumulation_steps, "
        "lr_schedule, warmup_steps)");
  CHECK(error_of("data: {kind: synthetic}\nruns:\n  - {name: a}\n  - {nmae: b}\n") ==
        "presets/x.yaml:4: nmae: unknown key (known in a runs entry: name, strategy, workers, "
        "device, train, data, model, comm, zero, ps, network, sweep, checkpoint, output)");
  CHECK(error_of("data: {kind: synthetic}\nruns:\n  - name: a\n    runs: []\n")
            .starts_with("presets/x.yaml:4: runs: unknown key (known in a runs entry:"));
  CHECK(error_of("data: {kind: synthetic}\nname: top\n") ==
        "presets/x.yaml:2: name: allowed only inside a runs entry");
  // One results folder per preset: a run's own output.dir would be written elsewhere.
  CHECK(error_of(
            "data: {kind: synthetic}\nruns:\n  - {name: a}\n  - {name: b, output: {dir: o2}}\n") ==
        "presets/x.yaml:4: output.dir: one value for the whole preset (its runs share one "
        "results folder): set it at the top level or with --set");
  CHECK(error_of("data: {kind: synthetic}\ntrain: {lr: 0.1, lr: 0.2}\n") ==
        "presets/x.yaml:2: train.lr: duplicate key");
  CHECK(
      error_of("data: {kind: synthetic}\nmodel: {hidden: [1], extra: {a: 1}}\n")
          .starts_with("presets/x.yaml:2: model.extra: unknown key (known in model: kind, hidden, "
                       "parameters, compute_ms, layers, resnet_blocks, resnet_width, "
                       "sync_batchnorm)"));
}

TEST_CASE("preset: sections and runs must have the right shape") {
  CHECK(error_of("data: {kind: synthetic}\ntrain: 5\n") ==
        "presets/x.yaml:2: train: expected a map of train keys, got '5'");
  CHECK(error_of("data: {kind: synthetic}\nruns: {name: a}\n") ==
        "presets/x.yaml:2: runs: expected a non-empty list of run entries, got a map");
  CHECK(error_of("data: {kind: synthetic}\nruns: []\n").starts_with("presets/x.yaml:2: runs:"));
  CHECK(error_of("data: {kind: synthetic}\nruns:\n  - {name: a}\n  - dp\n") ==
        "presets/x.yaml:4: runs: entry 2: expected a map of keys, got 'dp'");
  CHECK(error_of("- 1\n- 2\n") == "presets/x.yaml:1: preset: expected a map of keys, got a list");
  CHECK(error_of("train: {lr: [1, 2\n").starts_with("presets/x.yaml:"));
  CHECK(error_of("train: {lr: [1, 2\n").find("preset: invalid YAML") != std::string::npos);
  // A section left empty (everything in it commented out) is allowed.
  CHECK(load("data: {kind: synthetic}\ntrain:\n").runs[0].train.lr == Config().train.lr);
}

TEST_CASE("preset: values of the wrong type") {
  CHECK(error_of("data: {kind: synthetic}\ntrain:\n  batch: 8\n  lr: fast\n") ==
        "presets/x.yaml:4: train.lr: expected a number, got 'fast'");
  CHECK(error_of("data: {kind: synthetic}\ntrain: {batch: 1.5}\n") ==
        "presets/x.yaml:2: train.batch: expected an integer, got '1.5'");
  CHECK(error_of("data: {kind: synthetic}\nworkers: abc\n") ==
        "presets/x.yaml:2: workers: expected an integer, got 'abc'");
  CHECK(error_of("data: {kind: synthetic}\nworkers: [1]\n") ==
        "presets/x.yaml:2: workers: expected an integer, got a list");
  // Past the field's own type, a value is out of the key's range like any other.
  CHECK(error_of("data: {kind: synthetic}\nworkers: 99999999999\n") ==
        "presets/x.yaml:2: workers: must be in [1, 1024], got '99999999999'");
  CHECK(error_of("data: {kind: synthetic}\ntrain: {seed: 18446744073709551616}\n") ==
        "presets/x.yaml:2: train.seed: must be in [0, 18446744073709551615], got "
        "'18446744073709551616'");
  CHECK(error_of("data: {kind: synthetic}\ntrain: {seed: -1}\n") ==
        "presets/x.yaml:2: train.seed: must be in [0, 18446744073709551615], got '-1'");
  CHECK(error_of("data: {kind: synthetic}\ntrain: {lr: nan}\n") ==
        "presets/x.yaml:2: train.lr: expected a finite number, got 'nan'");
  CHECK(error_of("data: {kind: synthetic}\ntrain: {lr: inf}\n") ==
        "presets/x.yaml:2: train.lr: expected a finite number, got 'inf'");
  CHECK(error_of("data: {kind: synthetic}\ntrain: {lr: .inf}\n") ==
        "presets/x.yaml:2: train.lr: expected a number, got '.inf'");
  CHECK(error_of("data: {kind: synthetic}\ntrain: {lr: 1e999}\n") ==
        "presets/x.yaml:2: train.lr: must be in (0, 1000], got '1e999'");
  CHECK(error_of("data: {kind: synthetic}\noutput: {dir: {a: 1}}\n") ==
        "presets/x.yaml:2: output.dir: expected a string, got a map");
  CHECK(error_of("data: {kind: synthetic}\nmodel:\n  hidden:\n    - 256\n    - wide\n") ==
        "presets/x.yaml:5: model.hidden: element 2: expected an integer, got 'wide'");
  CHECK(error_of("data: {kind: synthetic}\nmodel: {hidden: 7x}\n") ==
        "presets/x.yaml:2: model.hidden: element 1: expected an integer, got '7x'");
  // Numbers accept integers and exponents; integers accept a leading '+'.
  CHECK(load("data: {kind: synthetic}\ntrain: {lr: 1, weight_decay: 5e-4, batch: +8}\n")
            .runs[0]
            .train.weight_decay == 5e-4);
}

TEST_CASE("preset: values out of range") {
  CHECK(error_of("data: {kind: synthetic}\nworkers: 0\n") ==
        "presets/x.yaml:2: workers: must be in [1, 1024], got '0'");
  CHECK(error_of("data: {kind: synthetic}\ntrain: {lr: 0}\n") ==
        "presets/x.yaml:2: train.lr: must be in (0, 1000], got '0'");
  CHECK(error_of("data: {kind: synthetic}\ntrain: {momentum: 1}\n") ==
        "presets/x.yaml:2: train.momentum: must be in [0, 1), got '1'");
  CHECK(error_of("data: {kind: synthetic}\ntrain: {target_accuracy: 0}\n") ==
        "presets/x.yaml:2: train.target_accuracy: must be in (0, 1], got '0'");
  CHECK(error_of("data: {kind: synthetic}\ntrain: {steps: -1}\n") ==
        "presets/x.yaml:2: train.steps: must be in [0, 100000000], got '-1'");
  CHECK(error_of("data: {kind: synthetic, classes: 0}\n") ==
        "presets/x.yaml:1: data.classes: must be in [1, 10000], got '0'");
  CHECK(error_of("data: {kind: synthetic}\nmodel: {hidden: [256, 0]}\n") ==
        "presets/x.yaml:2: model.hidden: element 2: must be in [1, 1000000], got '0'");
  // Upper bounds: counts and sizes have one too (every key: test_preset_ranges.cpp).
  CHECK(error_of("data: {kind: synthetic}\ntrain: {steps: 100000001}\n") ==
        "presets/x.yaml:2: train.steps: must be in [0, 100000000], got '100000001'");
  CHECK(error_of("data: {kind: synthetic}\nmodel: {hidden: [2000000]}\n") ==
        "presets/x.yaml:2: model.hidden: element 1: must be in [1, 1000000], got '2000000'");
  // Timeouts: whole milliseconds at least, a week at most (no deadline can overflow a clock).
  CHECK(error_of("data: {kind: synthetic}\ncomm: {timeout_s: 0.0001}\n") ==
        "presets/x.yaml:2: comm.timeout_s: must be in [0.001, 604800], got '0.0001'");
  CHECK(error_of("data: {kind: synthetic}\ncomm: {timeout_s: 1e12}\n") ==
        "presets/x.yaml:2: comm.timeout_s: must be in [0.001, 604800], got '1e12'");
  CHECK(error_of("data: {kind: synthetic}\nps: {heartbeat_s: 1e9}\n")
            .starts_with("presets/x.yaml:2: ps.heartbeat_s: must be in [0.001, 3600]"));
  CHECK(load("data: {kind: synthetic}\ntrain: {target_accuracy: 1, momentum: 0.99}\n")
            .runs[0]
            .train.target_accuracy == 1.0);
}

TEST_CASE("preset: combinations that would fail inside a run are refused at load") {
  // The synthetic model splits its parameters into layers of one parameter at least.
  CHECK(error_of("data: {kind: synthetic}\nmodel:\n  kind: synthetic\n  parameters: 10\n"
                 "  layers: 11\n") ==
        "presets/x.yaml:5: model.layers: 11 layers of a model of 10 model.parameters: at most one "
        "layer per parameter");
  CHECK_NOTHROW(
      load("data: {kind: synthetic}\nmodel: {kind: synthetic, parameters: 10, "
           "layers: 10}\n"));
  // The namespace network is one /24: 249 processes, shards and ranks together.
  CHECK(error_of("data: {kind: synthetic}\nstrategy: ps\nworkers: 248\nps: {servers: 2}\n"
                 "network: {namespaces: true}\n") ==
        "presets/x.yaml:3: network.namespaces: one network of at most 249 processes, got 248 "
        "workers + 2 ps.servers (leave it false and use network.link_gbps alone)");
  CHECK_NOTHROW(
      load("data: {kind: synthetic}\nstrategy: allreduce\nworkers: 249\n"
           "network: {namespaces: true}\n"));
  // Sync averages every worker each step: its shards refuse to drop one.
  CHECK(error_of("data: {kind: synthetic}\nstrategy: ps\nworkers: 2\n"
                 "ps: {mode: sync, continue_without_dead_workers: true}\n") ==
        "presets/x.yaml:4: ps.continue_without_dead_workers: not possible in ps.mode sync (async "
        "and ssp only): sync averages every worker's gradient each step");
  CHECK_NOTHROW(
      load("data: {kind: synthetic}\nstrategy: ps\nworkers: 2\n"
           "ps: {mode: async, continue_without_dead_workers: true}\n"));
}

TEST_CASE("preset: run names must be unique folder names") {
  CHECK(error_of("data: {kind: synthetic}\nruns:\n  - {name: a}\n  - {name: a}\n") ==
        "presets/x.yaml:4: name: duplicate run name 'a' (also at presets/x.yaml:3)");
  CHECK(error_of("data: {kind: synthetic}\nruns:\n  - {workers: 2}\n  - name: b\n  - {}\n",
                 {"strategy=dp", "workers=2"}) ==
        "presets/x.yaml:5: name: duplicate run name 'dp-2' (also at presets/x.yaml:3)");
  CHECK(error_of("data: {kind: synthetic}\nruns:\n  - {name: ../up}\n") ==
        "presets/x.yaml:3: name: run name '../up' may use only letters, digits, '.', '_', '-'");
}

TEST_CASE("preset: data directories are checked after resolution") {
  TempDir dir;
  CHECK(error_of("data: {kind: idx}\n") ==
        "presets/x.yaml:1: data.dir: required when data.kind is idx (an MNIST-format folder)");
  CHECK(error_of("train: {lr: 0.1}\ndata:\n  kind: idx\n  dir: /nope/gradsync\n") ==
        "presets/x.yaml:4: data.dir: directory '/nope/gradsync' does not exist");
  CHECK(error_of("data: {kind: synthetic}\n", {"data.kind=idx", "data.dir=/nope/gradsync"}) ==
        "--set: data.dir: directory '/nope/gradsync' does not exist");
  const std::string fashion = error_of("data:\n  kind: fashion-mnist\n  dir: /nope/fm\n");
  CHECK(fashion.starts_with("presets/x.yaml:3: data.dir: directory '/nope/fm' does not exist"));
  CHECK(fashion.find("apt-get install dataset-fashion-mnist") != std::string::npos);

  const std::string file = dir.str() + "/plain-file";
  std::ofstream(file) << "x";
  CHECK(error_of("data: {kind: idx, dir: '" + file + "'}\n") ==
        "presets/x.yaml:1: data.dir: '" + file + "' is not a directory");

  CHECK(load("data: {kind: idx, dir: '" + dir.str() + "'}\n").runs[0].data.dir == dir.str());
  CHECK(load("data: {kind: fashion-mnist}\n", {"data.dir=" + dir.str()}).runs[0].data.dir ==
        dir.str());

  // Without data.dir, fashion-mnist resolves the packaged default (present or not here).
  const std::string packaged = "/usr/share/datasets/fashion-mnist";
  if (fs::is_directory(packaged)) {
    CHECK(load("strategy: single\n").runs[0].data.dir == packaged);
  } else {
    const std::string missing = error_of("strategy: single\ndata:\n  kind: fashion-mnist\n");
    CHECK(missing.starts_with("presets/x.yaml:3: data.dir: directory '" + packaged + "'"));
    CHECK(missing.find("apt-get install dataset-fashion-mnist") != std::string::npos);
  }
}

TEST_CASE("preset: bad --set overrides") {
  CHECK(error_of(kSynthetic, {"train.lr"}) == "--set: train.lr: expected key=value");
  CHECK(error_of(kSynthetic, {"train.stpes=3"}) ==
        "--set: train.stpes: unknown key (known in train: steps, epochs, batch, lr, momentum, "
        "weight_decay, seed, eval_every, target_accuracy, accumulation_steps, lr_schedule, "
        "warmup_steps)");
  CHECK(error_of(kSynthetic, {"lr=3"}) ==
        "--set: lr: unknown key (known at top level: strategy, workers, device, train, "
        "data, model, comm, zero, ps, network, sweep, checkpoint, output)");
  CHECK(error_of(kSynthetic, {"train=3"}).starts_with("--set: train: is a section, not a key"));
  CHECK(error_of(kSynthetic, {"name=x"}) == "--set: name: allowed only inside a runs entry");
  CHECK(error_of(kSynthetic, {"train.batch=1.5"}) ==
        "--set: train.batch: expected an integer, got '1.5'");
  CHECK(error_of(kSynthetic, {"model.hidden=256,x"}) ==
        "--set: model.hidden: element 2: expected an integer, got 'x'");
  CHECK(error_of(kSynthetic, {"model.hidden=[256"})
            .starts_with("--set: model.hidden: cannot parse value '[256'"));
  CHECK(error_of(kSynthetic, {"strategy=ddp"}) ==
        "--set: strategy: unknown strategy 'ddp' (valid: single, dp, allreduce, zero, ps)");
  // The error names --set even though the file itself is fine.
  try {
    load(kSynthetic, {"workers=0"});
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(e.where() == "--set");
    CHECK(e.key() == "workers");
  }
}

}  // namespace gradsync
