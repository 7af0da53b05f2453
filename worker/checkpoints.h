// Checkpoint and resume for every strategy (preset `checkpoint: {every, dir, resume}`,
// `gradsync run PRESET --resume DIR`). The files are common/checkpoint_file.h's parts:
//
//   single, dp, allreduce: rank 0 writes one part, the whole buffer with its optimizer state;
//   zero:                  every rank its slices;
//   ps (sync):             each shard writes the part of its key range (server/ps_shard).
//
// A model with running statistics (batch norm's: Model::buffers()) also has rank 0's kept in
// the step folder (common/checkpoint_buffers.h), written before the parts (ps: by worker 0
// after its step); on resume every rank restores them. Rank 0's are those its evaluation reads
// and, under dp and allreduce with comm.broadcast_buffers, every replica's; where ranks keep
// their own (broadcast_buffers false, ps) the others' are not kept, as a torch checkpoint of
// rank 0's state_dict keeps none: nothing but evaluation reads them, and a resumed rank starts
// from rank 0's.
//
// A checkpoint is written every `every` steps and after the last step, into
// <checkpoint.dir>/step-<N>/ (default dir: <run folder>/checkpoints). The sampler's position
// needs no saving: a rank's batch at step t is a pure function of (seed, t) (model/sampler.h),
// so continuing at step N replays exactly the batches an uninterrupted run would have seen.
//
// On resume every worker (and every ps shard) reads the checkpoint itself, so on several
// machines the folder must be on a filesystem they share, as with torch.load on every rank.
// A checkpoint of another model, or a part that is truncated or corrupted, is refused with a
// DataError naming the file; the step folder resumed from is only ever read.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "allreduce/store.h"
#include "common/checkpoint_file.h"
#include "common/config.h"
#include "model/model.h"
#include "strategies/sync_strategy.h"
#include "worker/checkpoint_folders.h"   // where checkpoints are, which one --resume names
#include "worker/checkpoint_settings.h"  // the settings kept beside them

namespace gradsync {

// What a checkpoint restores, for the range [begin, end) of the buffer a reader asked for.
struct TrainingState {
  std::uint64_t step = 0;             // steps completed: training continues with this step
  std::uint64_t optimizer_steps = 0;  // updates the optimizer had taken
  std::vector<float> params;
  std::vector<float> momentum;
  // Rank 0's running statistics (Model::buffers()); empty where the checkpoint has none (a
  // model without them). `buffers_file`: where they were read, or looked for (for errors).
  std::vector<float> buffers;
  std::string buffers_file;
};

// The model a checkpoint belongs to, e.g. "mlp 784-256-256-10" or "synthetic 1000000 in 10
// layers"; `widths` as in RunPlan. Resuming checks it and the parameter count.
std::string model_description(const Config& config, const std::vector<int>& widths);

// Reads the parts of `step_folder` that cover [begin, end) and returns that range, and the
// buffers file if there is one. Throws DataError naming the part (or buffers file) that is
// unreadable, of another model (description or `total` differs), or disagrees with the others
// (step); or the folder, when the parts do not cover the range.
TrainingState load_training_state(const std::string& step_folder, const std::string& description,
                                  std::uint64_t total, std::uint64_t begin, std::uint64_t end);

// Throws ConfigError for what cannot be checkpointed: ps in async or ssp mode (its shards share
// no step at which the model is one consistent state).
void validate_checkpointing(const Config& config);

// Throws DataError (naming state.buffers_file) when the checkpoint's running statistics do not
// fit `model`: none for a model that keeps some, or another count. A model without buffers
// takes any checkpoint.
void check_resumed_buffers(const TrainingState& state, Model& model);

// Writes rank 0's checkpoints (single, dp, allreduce): after step `steps_done` when it is a
// multiple of `every` or the last one, its part and the run's training_settings(). With
// `writes_parts` false (worker 0 of ps, whose shards write the parts) only the buffers.
class Checkpointer {
 public:
  Checkpointer(std::string root, std::int64_t every, std::int64_t last_step,
               std::string description, std::string settings, bool writes_parts = true);

  bool due(std::int64_t steps_done) const;
  bool writes_parts() const { return writes_parts_; }
  // Rank 0's running statistics, as buffers.bin of the step folder; before the parts, so that
  // a complete checkpoint holds them.
  void save_buffers(std::int64_t steps_done, std::span<const float> buffers) const;
  // Copies the parameters (from wherever the model keeps them) and the optimizer's state.
  void save(std::int64_t steps_done, Model& model, const Optimizer& optimizer) const;
  // Writes the parts a rank owns of a checkpoint of `parts` parts (SyncStrategy::OwnParts, zero:
  // every rank its own); `settings` on the rank that writes the run's training settings.
  void save_parts(std::int64_t steps_done, int parts,
                  std::vector<std::pair<int, CheckpointPart>> mine, bool settings) const;

 private:
  std::string root_;
  std::int64_t every_;
  std::int64_t last_step_;
  std::string description_;
  std::string settings_;
  bool writes_parts_;
};

// What one process of a run needs: the state to resume from, and rank 0's checkpointer.
struct RunCheckpoints {
  std::optional<TrainingState> resume;  // ps workers: the step only (the shards hold the rest)
  std::string resumed_from;             // the step folder `resume` was read from
  // rank 0 of single / dp / allreduce / ps (its buffers only), every rank of zero; every > 0
  std::optional<Checkpointer> writer;
};

// For rank `rank` of `config`, whose run ends after step `last_step`; checkpoint.resume is
// resolved here (resolve_checkpoint). Throws ConfigError when the checkpoint is at or past
// last_step.
RunCheckpoints prepare_checkpoints(const Config& config, const std::vector<int>& widths,
                                   std::int64_t last_step, const std::string& run_dir, int rank);

// A run started again after a failure (gradsync run --max-restarts, torchrun --max_restarts)
// continues from the newest complete checkpoint under its checkpoint root: returns that step
// folder, or an empty string when there is none (the run starts over). Either way the run
// folder's metrics.csv keeps only the rows of the steps before it (keep_rows_before), so every
// step ends with one row per rank. For the one process that decides (the launcher, or rank 0),
// before any rank of the new attempt writes.
std::string prepare_restart(const Config& config, const std::string& run_dir);

// Under mpirun, srun or torchrun every rank resolves checkpoint.resume itself, and on a shared
// filesystem one host's listing may lag another's: "the newest complete step" could differ.
// Rank 0 posts the step it resumes from in the run's Store; every other rank compares its own
// (waiting at most `timeout`) and throws ConfigError naming both folders when they differ,
// before any step is trained. Each rank calls it once, with the same Store.
void agree_on_resumed_step(Store& store, int rank, std::uint64_t step, const std::string& folder,
                           std::chrono::milliseconds timeout);

}  // namespace gradsync
