// One part of a checkpoint: a contiguous range of the flat parameter buffer with its optimizer
// state, written atomically by the process that owns the range (rank 0 for single / dp /
// allreduce, each server shard for ps).
//
//   <root>/step-00000050/part-0-of-1.ckpt      rank 0: the whole buffer
//   <root>/step-00000050/part-1-of-2.ckpt      ps: shard 1 of 2, its key range
//
// A checkpoint (one step folder) is complete when parts 0..K-1 of K are all there; the parts tile
// [0, total) in order. Since a part is any range, a checkpoint written by K shards resumes a run
// with another shard count or another strategy: ps sync, allreduce, dp and single follow the
// same trajectory, so their checkpoints are interchangeable.
//
// File layout, little-endian:
//   0   16  magic "gradsync-ckpt\0\0\0"
//   16   4  format version (1)
//   20   4  description length L
//   24   8  step            steps completed: the run continues with this step
//   32   8  total           floats in the whole model
//   40   8  begin, 48 8 end   this part's range [begin, end)
//   56   8  optimizer steps  updates the optimizer had taken (torch's first-step rule)
//   64   L  description     the model, as worker/checkpoints.h describes it
//   ..      params[end - begin] floats, then momentum[end - begin] floats
//   ..   4  CRC-32 (zlib) of every byte before it
// Writing goes to <file>.tmp, is fsync'd, renamed, and the folder fsync'd: a crash leaves the
// old file or the new one, never half of one. Reading checks every field and the CRC and throws
// gradsync::DataError naming the file and what is wrong with it (truncated, not a checkpoint,
// another version, corrupted); it never modifies the file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gradsync {

struct CheckpointPart {
  std::uint64_t step = 0;
  std::uint64_t total = 0;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint64_t optimizer_steps = 0;
  std::string description;
  std::vector<float> params;    // end - begin floats
  std::vector<float> momentum;  // end - begin floats
};

// Beside the parts of a step folder: the settings the run trained with, "key value" lines
// (worker/checkpoints.h, training_settings). Optional; reading a checkpoint ignores it.
inline constexpr const char* kCheckpointSettingsFile = "training.txt";

// "<root>/step-00000050" (zero-padded so that names sort by step).
std::string checkpoint_step_folder(const std::string& root, std::uint64_t step);
// "part-1-of-2.ckpt"
std::string checkpoint_part_name(int part, int parts);

// Creates the step folder if needed and writes the part atomically. Throws gradsync::Error
// naming the file on any failure; an existing file of that name is left as it was then.
void write_checkpoint_part(const std::string& path, const CheckpointPart& part);

// Writes `settings` as the step folder's kCheckpointSettingsFile. The settings only serve a
// note on resume, so a failure is returned as its reason ("" when written), not thrown: the
// checkpoint is complete without them.
std::string write_checkpoint_settings(const std::string& step_folder, const std::string& settings);

// Reads and validates a part. Throws gradsync::DataError(path, problem). With `header_only`, only
// the fixed fields and the description are read and checked (no payload, no CRC): enough to
// learn a checkpoint's step without reading the model.
CheckpointPart read_checkpoint_part(const std::string& path, bool header_only = false);

// The file's bytes for `part` (what write_checkpoint_part writes).
std::string encode_checkpoint_part(const CheckpointPart& part);

// The decoder itself, on bytes already in memory; `name` is what errors say (the file).
// With `header_only`, `bytes` may be just the file's beginning.
CheckpointPart parse_checkpoint_part(std::string_view bytes, const std::string& name,
                                     bool header_only = false);

}  // namespace gradsync
