// Checkpoint files (common/checkpoint_file.h) and how a run finds and reads them
// (worker/checkpoints.h): round trip, every kind of damage refused with the file named,
// resolution of the newest complete checkpoint, parts of any ranges joined.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "allreduce/in_memory_store.h"
#include "common/checkpoint_file.h"
#include "common/error.h"
#include "tests/support/temp_dir.h"
#include "worker/checkpoints.h"

namespace fs = std::filesystem;
using gradsync::CheckpointPart;
using gradsync::testing::TempDir;

namespace {

// Part `index` of `parts` of a model of `total` floats at `step`: params[i] = i, momentum -i.
CheckpointPart make_part(std::uint64_t step, std::uint64_t total, std::uint64_t begin,
                         std::uint64_t end, const std::string& description = "mlp 4-3-2") {
  CheckpointPart part;
  part.step = step;
  part.total = total;
  part.begin = begin;
  part.end = end;
  part.optimizer_steps = step;
  part.description = description;
  for (std::uint64_t i = begin; i < end; ++i) {
    part.params.push_back(static_cast<float>(i));
    part.momentum.push_back(-static_cast<float>(i));
  }
  return part;
}

void write_part(const std::string& root, const CheckpointPart& part, int index, int parts) {
  gradsync::write_checkpoint_part((fs::path(gradsync::checkpoint_step_folder(root, part.step)) /
                                   gradsync::checkpoint_part_name(index, parts))
                                      .string(),
                                  part);
}

std::string read_error(const std::string& path) {
  try {
    gradsync::read_checkpoint_part(path);
  } catch (const gradsync::DataError& e) {
    return e.what();
  }
  return "";
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void put_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace

TEST_CASE("checkpoint file: a part reads back exactly, and the folder has no temporary left") {
  TempDir dir;
  const CheckpointPart part = make_part(50, 26, 3, 17);
  write_part(dir.file("ckpt"), part, 1, 3);
  const std::string folder = dir.file("ckpt/step-00000050");
  const CheckpointPart back = gradsync::read_checkpoint_part(folder + "/part-1-of-3.ckpt");
  CHECK(back.step == 50);
  CHECK(back.total == 26);
  CHECK(back.begin == 3);
  CHECK(back.end == 17);
  CHECK(back.optimizer_steps == 50);
  CHECK(back.description == "mlp 4-3-2");
  CHECK(back.params == part.params);
  CHECK(back.momentum == part.momentum);
  CHECK(std::distance(fs::directory_iterator(folder), fs::directory_iterator()) == 1);
  const CheckpointPart head = gradsync::read_checkpoint_part(folder + "/part-1-of-3.ckpt", true);
  CHECK(head.step == 50);
  CHECK(head.params.empty());
}

TEST_CASE("checkpoint file: truncation, a flipped bit, trailing bytes and garbage are refused") {
  TempDir dir;
  write_part(dir.file("c"), make_part(7, 100, 0, 100), 0, 1);
  const std::string path = dir.file("c/step-00000007/part-0-of-1.ckpt");
  const std::string good = bytes_of(path);

  put_bytes(path, good.substr(0, good.size() - 9));
  CHECK(read_error(path) == path + ": truncated: " + std::to_string(good.size() - 9) +
                                " bytes, expected " + std::to_string(good.size()));
  put_bytes(path, good.substr(0, 40));
  CHECK(read_error(path).find("truncated: 40 bytes") != std::string::npos);

  std::string flipped = good;
  flipped[200] ^= 0x01;
  put_bytes(path, flipped);
  CHECK(read_error(path) == path + ": corrupted: CRC-32 mismatch");

  put_bytes(path, good + "x");
  CHECK(read_error(path).find("trailing bytes") != std::string::npos);

  put_bytes(path, "PK\x03\x04 not a checkpoint at all");
  CHECK(read_error(path) == path + ": not a gradsync checkpoint (bad magic)");

  std::string other_version = good;
  other_version[16] = 9;
  put_bytes(path, other_version);
  CHECK(read_error(path).find("format version 9") != std::string::npos);

  CHECK(read_error(dir.file("missing.ckpt")).find("cannot open checkpoint") != std::string::npos);
}

TEST_CASE("checkpoints: resume finds the newest complete step, through run and preset folders") {
  TempDir dir;
  const std::string root = dir.file("preset/run-a/checkpoints");
  write_part(root, make_part(50, 10, 0, 10), 0, 1);
  write_part(root, make_part(60, 10, 0, 5), 0, 2);  // step 60: one part of two, a crash
  const std::string step50 = gradsync::checkpoint_step_folder(root, 50);
  const std::string step60 = gradsync::checkpoint_step_folder(root, 60);

  CHECK(gradsync::resolve_checkpoint(root, "run-a") == step50);
  CHECK(gradsync::resolve_checkpoint(dir.file("preset/run-a"), "run-a") == step50);
  CHECK(gradsync::resolve_checkpoint(dir.file("preset"), "run-a") == step50);
  CHECK(gradsync::resolve_checkpoint(step50, "run-a") == step50);
  CHECK_THROWS_WITH_AS(gradsync::resolve_checkpoint(step60, "run-a"),
                       (step60 + ": incomplete checkpoint: 1 of 2 part files "
                                 "(part-<k>-of-<K>.ckpt) present")
                           .c_str(),
                       gradsync::DataError);
  CHECK_THROWS_AS(gradsync::resolve_checkpoint(dir.file("preset"), "run-b"), gradsync::ConfigError);
  CHECK_THROWS_AS(gradsync::resolve_checkpoint(dir.file("nowhere"), "run-a"),
                  gradsync::ConfigError);

  write_part(root, make_part(60, 10, 5, 10), 1, 2);  // now complete: it is the newest
  CHECK(gradsync::resolve_checkpoint(root, "run-a") == step60);
  CHECK(gradsync::checkpoint_step(step60) == 60);
}

TEST_CASE("checkpoints: any range is read across the parts that tile it") {
  TempDir dir;
  const std::string root = dir.file("c");
  write_part(root, make_part(9, 10, 0, 4), 0, 3);
  write_part(root, make_part(9, 10, 4, 7), 1, 3);
  write_part(root, make_part(9, 10, 7, 10), 2, 3);
  const std::string folder = gradsync::checkpoint_step_folder(root, 9);

  const gradsync::TrainingState whole =
      gradsync::load_training_state(folder, "mlp 4-3-2", 10, 0, 10);
  CHECK(whole.step == 9);
  CHECK(whole.optimizer_steps == 9);
  CHECK(whole.params == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(whole.momentum[9] == -9.f);
  // A shard of another shard count: keys [3, 8) span all three parts.
  const gradsync::TrainingState middle =
      gradsync::load_training_state(folder, "mlp 4-3-2", 10, 3, 8);
  CHECK(middle.params == std::vector<float>{3, 4, 5, 6, 7});
  CHECK(middle.momentum == std::vector<float>{-3, -4, -5, -6, -7});
  // A ps worker asks for no keys: only the step.
  CHECK(gradsync::load_training_state(folder, "mlp 4-3-2", 10, 0, 0).step == 9);
}

TEST_CASE("checkpoints: another model, or parts of different steps, are refused naming the file") {
  TempDir dir;
  const std::string root = dir.file("c");
  write_part(root, make_part(5, 10, 0, 5), 0, 2);
  write_part(root, make_part(5, 10, 5, 10, "mlp 4-8-2"), 1, 2);
  const std::string folder = gradsync::checkpoint_step_folder(root, 5);
  const std::string part1 = folder + "/part-1-of-2.ckpt";
  CHECK_THROWS_WITH_AS(gradsync::load_training_state(folder, "mlp 4-3-2", 10, 0, 10),
                       (part1 + ": is a checkpoint of another model (mlp 4-8-2, 10 parameters); "
                                "this run trains mlp 4-3-2, 10 parameters")
                           .c_str(),
                       gradsync::DataError);
  CHECK_THROWS_AS(gradsync::load_training_state(folder, "mlp 4-3-2", 12, 0, 12),
                  gradsync::DataError);

  // A part from another moment of the run, copied into this folder by hand.
  gradsync::write_checkpoint_part(part1, make_part(6, 10, 5, 10));
  CHECK_THROWS_WITH_AS(gradsync::load_training_state(folder, "mlp 4-3-2", 10, 0, 10),
                       (part1 + ": is of step 6 (6 optimizer updates), the other parts of " +
                        folder + " of step 5 (5)")
                           .c_str(),
                       gradsync::DataError);
}

TEST_CASE("checkpoints: the model description names the layer widths or the synthetic size") {
  gradsync::Config config;
  CHECK(gradsync::model_description(config, {784, 256, 10}) == "mlp 784-256-10");
  config.model.kind = "synthetic";
  config.model.parameters = 1000;
  config.model.layers = 4;
  CHECK(gradsync::model_description(config, {784, 256, 10}) == "synthetic 1000 in 4 layers");
}

TEST_CASE("checkpoints: ps in async or ssp mode is refused, naming the key") {
  for (const char* mode : {"async", "ssp"}) {
    CAPTURE(mode);
    gradsync::Config config;
    config.name = "ps-async";
    config.strategy = "ps";
    config.ps.mode = mode;
    config.checkpoint.every = 10;
    CHECK_THROWS_WITH_AS(gradsync::validate_checkpointing(config),
                         doctest::Contains("checkpoint.every"), gradsync::ConfigError);
    config.checkpoint.every = 0;
    config.checkpoint.resume = "results/latest";
    CHECK_THROWS_WITH_AS(gradsync::validate_checkpointing(config),
                         doctest::Contains("checkpoint.resume"), gradsync::ConfigError);
    config.ps.mode = "sync";
    CHECK_NOTHROW(gradsync::validate_checkpointing(config));
  }
}

TEST_CASE("checkpoints: ranks that resolved --resume to different steps stop before training") {
  using namespace std::chrono_literals;
  gradsync::InMemoryStore store;
  gradsync::agree_on_resumed_step(store, 0, 50, "/shared/run/checkpoints/step-50", 1s);
  // A rank that sees the same step goes on; one whose listing showed a newer step is refused,
  // with both folders named.
  CHECK_NOTHROW(gradsync::agree_on_resumed_step(store, 1, 50, "/mnt/run/checkpoints/step-50", 1s));
  CHECK_THROWS_WITH_AS(
      gradsync::agree_on_resumed_step(store, 2, 60, "/shared/run/checkpoints/step-60", 1s),
      doctest::Contains("resumes from /shared/run/checkpoints/step-60 (step 60) but rank 0 from "
                        "/shared/run/checkpoints/step-50 (step 50)"),
      gradsync::ConfigError);
  // Rank 0 never posting (it failed first) is a bounded wait, not a hang.
  gradsync::InMemoryStore silent;
  CHECK_THROWS_AS(gradsync::agree_on_resumed_step(silent, 1, 50, "step-50", 50ms),
                  gradsync::TimeoutError);
}

TEST_CASE("checkpoints: a resume under other settings names each one that changed") {
  TempDir tmp;
  const fs::path folder = tmp.path() / "step-00000050";
  fs::create_directories(folder);
  gradsync::Config trained;
  trained.strategy = "allreduce";
  trained.workers = 2;
  trained.train.lr = 0.1;
  std::ofstream(folder / gradsync::kCheckpointSettingsFile) << gradsync::training_settings(trained);
  CHECK(gradsync::changed_settings(folder.string(), trained).empty());
  gradsync::Config now = trained;
  now.workers = 4;
  now.train.lr = 0.05;
  CHECK(gradsync::changed_settings(folder.string(), now) ==
        std::vector<std::string>{"workers 2 -> 4", "train.lr 0.1 -> 0.05"});
  // A schedule the checkpoint's run did not have, and cosine's horizon with it.
  gradsync::Config cosine = trained;
  cosine.train.lr_schedule = "cosine";
  cosine.train.steps = 500;
  CHECK(gradsync::changed_settings(folder.string(), cosine) ==
        std::vector<std::string>{"train.lr_schedule (not used) -> cosine",
                                 "train.warmup_steps (not used) -> 0",
                                 "train.steps (not used) -> 500", "train.epochs (not used) -> 1"});
  // A checkpoint without the file (written before it existed) has nothing to compare.
  fs::remove(folder / gradsync::kCheckpointSettingsFile);
  CHECK(gradsync::changed_settings(folder.string(), now).empty());
}
