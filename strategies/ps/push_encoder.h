// PushEncoder: how a ps worker encodes each chunk of its gradient for the wire under
// comm.compression (common/wire_format.h, "Push encodings"). Only pushes are encoded: the
// parameters coming back stay exact fp32, since rounding them would round the model itself.
//
//   PushEncoder encoder({"topk", 0.01, 100});          // comm.compression, topk_ratio, start_step
//   auto [encoding, payload] = encoder.encode(step, chunk, grads);   // per PUSHPULL
//   header.aux = static_cast<std::uint32_t>(encoding);
//
//   none       fp32: the caller's own bytes, sent in place (no copy, no owner)
//   fp16/bf16  2 bytes a key (common/compression/half_codec.h), NOT divided by N first: the
//              shard decodes each push to fp32 and sums there (server/push_decoder.h), where N
//              gradients cannot overflow fp16's 65504; a gradient entry beyond it is inf on the
//              wire, as it would be in fp16_compress_hook
//   topk       per chunk, the k = comm.topk_ratio * keys largest |gradient + residual| entries
//              as k uint32 indices (relative to the chunk's first key) then k floats, with
//              error feedback: one TopKCodec per chunk keeps what was not sent, across steps
//              (common/compression/top_k_codec.h). An empty chunk goes as fp32 (zero bytes).
//
// Steps before `start_step` push fp32, and error feedback starts with the first compressed step.
// The residuals live in this object only: a run resumed from a checkpoint starts them at zero.
//
// Buffers: an encoded payload is owned by the Buffer returned (ZeroMQ may hold it until sent);
// each chunk's array is reused by a later step once nothing holds it any more, else a fresh one
// is made, so several requests may be in flight. Not thread-safe: one per PsClient.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/compression/top_k_codec.h"
#include "common/wire_format.h"
#include "server/key_range.h"
#include "server/message.h"

namespace gradsync {

struct PushCompression {
  std::string method = "none";  // comm.compression: none | fp16 | bf16 | topk
  double topk_ratio = 0.01;     // comm.topk_ratio, in (0, 1]
  std::int64_t start_step = 0;  // comm.compression_start_step: steps before it push fp32
};

class PushEncoder {
 public:
  // Throws gradsync::Error for a method pushes cannot use (powersgd: it needs an all-reduce
  // among the workers) or a top-k ratio outside (0, 1].
  explicit PushEncoder(PushCompression options);

  struct Encoded {
    wire::PushEncoding encoding = wire::PushEncoding::kFp32;
    Buffer payload;
  };

  // Chunk `keys` of `grads` (the whole gradient buffer) as pushed in `step`.
  Encoded encode(std::uint64_t step, KeyRange keys, std::span<const float> grads);

 private:
  // One chunk's state, keyed by its first key: its payload array and its top-k residual.
  struct Wire {
    std::vector<std::uint16_t> halves;   // fp16 / bf16
    std::vector<std::uint32_t> entries;  // top-k: k indices, then k values' bits
  };
  struct Slot {
    std::shared_ptr<Wire> wire;
    std::unique_ptr<compression::TopKCodec> top_k;
    compression::SparseGradient sparse;
  };

  Wire& free_wire(Slot& slot);

  PushCompression options_;
  wire::PushEncoding encoding_ = wire::PushEncoding::kFp32;  // from the first compressed step
  std::map<std::uint64_t, Slot> slots_;
};

}  // namespace gradsync
