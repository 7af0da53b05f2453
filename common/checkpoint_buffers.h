// A checkpoint's running statistics: the model's buffers() (batch norm's running mean and
// variance: state, but no parameter), in one file beside the parts of the step folder.
//
//   <root>/step-00000050/buffers.bin      rank 0's buffers, those its evaluation reads
//
// Rank 0 writes it before its part (under ps, where the shards write the parts, rank 0 of the
// workers writes it after its step), so a step folder whose parts are all there holds it too
// but for a ps run cut off in between. A model without buffers writes none: a checkpoint
// without the file is one of such a model, and resuming a model that has buffers from it is
// refused (worker/checkpoints.h).
//
// File layout, little-endian:
//   0   16  magic "gradsync-bufs\0\0\0"
//   16   4  format version (1)
//   20   4  description length L
//   24   8  step      steps completed, as the parts'
//   32   8  count     floats
//   40   L  description   the model, as the parts'
//   ..      values[count] floats
//   ..   4  CRC-32 (zlib) of every byte before it
// Written atomically (common/atomic_file.h); reading checks every field and the CRC and throws
// gradsync::DataError naming the file; it never modifies the file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gradsync {

inline constexpr const char* kCheckpointBuffersFile = "buffers.bin";

struct CheckpointBuffers {
  std::uint64_t step = 0;
  std::string description;
  std::vector<float> values;
};

// Creates the step folder if needed and writes <step_folder>/buffers.bin atomically. Throws
// gradsync::Error naming the file on any failure; an existing file is left as it was then.
void write_checkpoint_buffers(const std::string& step_folder, const CheckpointBuffers& buffers);

// <step_folder>/buffers.bin, or nullopt when the folder has none. Throws DataError(file,
// problem) for a file that is unreadable, truncated, of another format version or corrupted.
std::optional<CheckpointBuffers> read_checkpoint_buffers(const std::string& step_folder);

// The file's bytes, and the decoder on bytes in memory (`name`: what errors say).
std::string encode_checkpoint_buffers(const CheckpointBuffers& buffers);
CheckpointBuffers parse_checkpoint_buffers(std::string_view bytes, const std::string& name);

}  // namespace gradsync
