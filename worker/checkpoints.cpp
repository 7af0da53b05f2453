#include "worker/checkpoints.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>

#include "common/checkpoint_buffers.h"
#include "common/checkpoint_file.h"
#include "common/error.h"
#include "worker/metrics_writer.h"
#include "worker/model_factory.h"

namespace gradsync {
namespace fs = std::filesystem;

std::string model_description(const Config& config, const std::vector<int>& widths) {
  if (config.model.kind == "synthetic") {
    return "synthetic " + std::to_string(config.model.parameters) + " in " +
           std::to_string(config.model.layers) + " layers";
  }
  std::string text = config.model.kind + " ";
  for (std::size_t i = 0; i < widths.size(); ++i) {
    if (i > 0) text += '-';
    text += std::to_string(widths[i]);
  }
  return text;
}

TrainingState load_training_state(const std::string& step_folder, const std::string& description,
                                  std::uint64_t total, std::uint64_t begin, std::uint64_t end) {
  GRADSYNC_CHECK(begin <= end && end <= total, "load_training_state: range outside the model");
  const PartListing listing = list_parts(step_folder);
  if (!listing.complete()) throw listing.incomplete(step_folder);
  TrainingState state;
  state.params.resize(end - begin);
  state.momentum.resize(end - begin);
  std::uint64_t covered_to = 0;  // parts tile [0, total) in index order
  bool first = true;
  for (const auto& [index, file] : listing.parts) {
    // Headers first: a part that does not overlap this range is checked no further.
    const std::string name = file.string();
    CheckpointPart head = read_checkpoint_part(name, true);
    if (head.description != description || head.total != total) {
      throw DataError(name, "is a checkpoint of another model (" + head.description + ", " +
                                std::to_string(head.total) + " parameters); this run trains " +
                                description + ", " + std::to_string(total) + " parameters");
    }
    if (head.begin != covered_to) {
      throw DataError(name, "part " + std::to_string(index) + " starts at key " +
                                std::to_string(head.begin) + ", the parts before it end at " +
                                std::to_string(covered_to));
    }
    covered_to = head.end;
    if (head.end <= begin || head.begin >= end) continue;  // not in the range asked for
    const CheckpointPart part = read_checkpoint_part(name);
    if (first) {
      state.step = part.step;
      state.optimizer_steps = part.optimizer_steps;
      first = false;
    } else if (part.step != state.step || part.optimizer_steps != state.optimizer_steps) {
      throw DataError(name, "is of step " + std::to_string(part.step) + " (" +
                                std::to_string(part.optimizer_steps) +
                                " optimizer updates), the other parts of " + step_folder +
                                " of step " + std::to_string(state.step) + " (" +
                                std::to_string(state.optimizer_steps) + ")");
    }
    const std::uint64_t from = std::max(begin, part.begin);
    const std::uint64_t to = std::min(end, part.end);
    std::copy(part.params.begin() + static_cast<std::ptrdiff_t>(from - part.begin),
              part.params.begin() + static_cast<std::ptrdiff_t>(to - part.begin),
              state.params.begin() + static_cast<std::ptrdiff_t>(from - begin));
    std::copy(part.momentum.begin() + static_cast<std::ptrdiff_t>(from - part.begin),
              part.momentum.begin() + static_cast<std::ptrdiff_t>(to - part.begin),
              state.momentum.begin() + static_cast<std::ptrdiff_t>(from - begin));
  }
  if (covered_to != total) {
    throw DataError(step_folder, "its parts cover keys [0, " + std::to_string(covered_to) +
                                     ") of " + std::to_string(total));
  }
  if (first) state.step = checkpoint_step(step_folder);  // an empty range: only the step
  state.buffers_file = (fs::path(step_folder) / kCheckpointBuffersFile).string();
  if (std::optional<CheckpointBuffers> buffers = read_checkpoint_buffers(step_folder)) {
    if (buffers->description != description) {
      throw DataError(state.buffers_file, "holds the running statistics of another model (" +
                                              buffers->description + "); this run trains " +
                                              description);
    }
    if (buffers->step != state.step) {
      throw DataError(state.buffers_file, "is of step " + std::to_string(buffers->step) +
                                              ", the parts of " + step_folder + " of step " +
                                              std::to_string(state.step));
    }
    state.buffers = std::move(buffers->values);
  }
  return state;
}

namespace {

DataError missing_buffers(const TrainingState& state, const std::string& count) {
  return DataError(state.buffers_file, "missing: this model keeps " + count +
                                           "running statistics (batch norm), part of its "
                                           "state, and the checkpoint holds none (resume from "
                                           "another step)");
}

}  // namespace

void check_resumed_buffers(const TrainingState& state, Model& model) {
  const std::size_t want = model.buffers().size();
  if (want == 0 || state.buffers.size() == want) return;
  if (state.buffers.empty()) throw missing_buffers(state, std::to_string(want) + " ");
  throw DataError(state.buffers_file, "holds " + std::to_string(state.buffers.size()) +
                                          " running statistics, this model keeps " +
                                          std::to_string(want));
}

void validate_checkpointing(const Config& config) {
  const bool used = config.checkpoint.every > 0 || !config.checkpoint.resume.empty();
  if (used && config.strategy == "ps" && config.ps.mode != "sync") {
    throw ConfigError(config.name,
                      config.checkpoint.every > 0 ? "checkpoint.every" : "checkpoint.resume",
                      "ps in " + config.ps.mode +
                          " mode cannot checkpoint: its shards share no step at which the "
                          "model is one consistent state (use ps.mode: sync)");
  }
}

RunCheckpoints prepare_checkpoints(const Config& config, const std::vector<int>& widths,
                                   std::int64_t last_step, const std::string& run_dir, int rank) {
  validate_checkpointing(config);
  RunCheckpoints out;
  const std::string description = model_description(config, widths);
  const bool ps = config.strategy == "ps";
  if (!config.checkpoint.resume.empty()) {
    const std::string folder = resolve_checkpoint(config.checkpoint.resume, config.name);
    const std::uint64_t total = static_cast<std::uint64_t>(model_parameters(config, widths));
    // A ps worker's parameters come from the shards, which read their own ranges.
    out.resume = load_training_state(folder, description, total, 0, ps ? 0 : total);
    out.resumed_from = folder;
    // Before any rank starts (the loop checks the count against the model it builds).
    if (config.model.kind == "resnet" && out.resume->buffers.empty()) {
      throw missing_buffers(*out.resume, "");
    }
    if (static_cast<std::int64_t>(out.resume->step) >= last_step) {
      throw ConfigError(config.name, "checkpoint.resume",
                        folder + " is at step " + std::to_string(out.resume->step) +
                            " and the run ends at step " + std::to_string(last_step) +
                            ": nothing left to train (raise train.steps)");
    }
  }
  // zero: every rank writes its own slices (SyncStrategy::own_checkpoint_parts); ps: the shards
  // write the parts, worker 0 its running statistics (if the model keeps any).
  if (config.checkpoint.every > 0 && (rank == 0 || config.strategy == "zero")) {
    out.writer.emplace(checkpoint_root(config, run_dir), config.checkpoint.every, last_step,
                       description, training_settings(config), !ps);
  }
  return out;
}

std::string prepare_restart(const Config& config, const std::string& run_dir) {
  validate_checkpointing(config);
  bool any_step_folder = false;
  const std::optional<fs::path> newest =
      newest_complete(checkpoint_root(config, run_dir), any_step_folder);
  const std::string metrics = (fs::path(run_dir) / "metrics.csv").string();
  const std::int64_t step =
      newest ? static_cast<std::int64_t>(checkpoint_step(newest->string())) : 0;
  std::error_code ec;
  if (fs::exists(metrics, ec)) {
    keep_rows_before(metrics, step);
  } else {
    MetricsWriter header(metrics);
  }
  return newest ? newest->string() : std::string();
}

void agree_on_resumed_step(Store& store, int rank, std::uint64_t step, const std::string& folder,
                           std::chrono::milliseconds timeout) {
  const std::string step_key = "checkpoint/resume/step";
  const std::string folder_key = "checkpoint/resume/folder";
  if (rank == 0) {
    store.set(folder_key, folder);  // first: a rank that sees the step may read the folder
    store.set(step_key, std::to_string(step));
    return;
  }
  const std::string rank0_step = store.get(step_key, timeout);
  if (rank0_step == std::to_string(step)) return;
  throw ConfigError("rank " + std::to_string(rank), "checkpoint.resume",
                    "resumes from " + folder + " (step " + std::to_string(step) +
                        ") but rank 0 from " + store.get(folder_key, timeout) + " (step " +
                        rank0_step +
                        "): name one step folder, so that every rank reads the same one");
}

Checkpointer::Checkpointer(std::string root, std::int64_t every, std::int64_t last_step,
                           std::string description, std::string settings, bool writes_parts)
    : root_(std::move(root)),
      every_(every),
      last_step_(last_step),
      description_(std::move(description)),
      settings_(std::move(settings)),
      writes_parts_(writes_parts) {}

void Checkpointer::save_buffers(std::int64_t steps_done, std::span<const float> buffers) const {
  CheckpointBuffers file;
  file.step = static_cast<std::uint64_t>(steps_done);
  file.description = description_;
  file.values.assign(buffers.begin(), buffers.end());
  write_checkpoint_buffers(checkpoint_step_folder(root_, file.step), file);
}

bool Checkpointer::due(std::int64_t steps_done) const {
  return every_ > 0 && (steps_done % every_ == 0 || steps_done == last_step_);
}

void Checkpointer::save(std::int64_t steps_done, Model& model, const Optimizer& optimizer) const {
  CheckpointPart part;
  part.step = static_cast<std::uint64_t>(steps_done);
  part.total = model.param_count();
  part.begin = 0;
  part.end = part.total;
  part.optimizer_steps = optimizer.steps_taken();
  part.description = description_;
  part.params.resize(part.total);
  part.momentum.resize(part.total);
  model.copy_params_to_host(part.params);
  optimizer.save_state(part.momentum);
  const std::string folder = checkpoint_step_folder(root_, part.step);
  write_checkpoint_part((fs::path(folder) / checkpoint_part_name(0, 1)).string(), part);
  if (const std::string problem = write_checkpoint_settings(folder, settings_); !problem.empty()) {
    std::cerr << "gradsync: warning: " << problem << " (the checkpoint itself is complete)\n";
  }
}

void Checkpointer::save_parts(std::int64_t steps_done, int parts,
                              std::vector<std::pair<int, CheckpointPart>> mine,
                              bool settings) const {
  const std::string folder = checkpoint_step_folder(root_, static_cast<std::uint64_t>(steps_done));
  for (auto& [index, part] : mine) {
    part.step = static_cast<std::uint64_t>(steps_done);
    part.description = description_;
    write_checkpoint_part((fs::path(folder) / checkpoint_part_name(index, parts)).string(), part);
  }
  if (!settings) return;
  if (const std::string problem = write_checkpoint_settings(folder, settings_); !problem.empty()) {
    std::cerr << "gradsync: warning: " << problem << " (the checkpoint itself is complete)\n";
  }
}

}  // namespace gradsync
