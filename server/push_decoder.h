// decode_push: a PUSHPULL's payload as the dense fp32 gradient of its chunk, whatever its
// encoding (wire_format.h, "Push encodings"), so the consistency rules (consistency/) only ever
// see floats: sync sums the N decoded pushes in fp32 and averages them as it always did, async
// and ssp apply each as it comes.
//
//   Buffer grad = decode_push(header, payload);   // header.payload_bytes == payload.size()
//   policy->push(rank, header, grad, chunk);
//
//   fp32       the payload itself (no copy)
//   fp16/bf16  each 16-bit value widened to fp32 (exact: every fp16 and bf16 value is an fp32
//              one). The workers do not divide by N before encoding, as fp16_compress_hook does
//              before an all-reduce of 16-bit values: here the sum happens in fp32, after
//              decoding, where N gradients cannot overflow; dividing first would only push small
//              values into fp16's subnormals and lose precision
//   topk       zeros, then each value added at its index (relative to key_begin); duplicates
//              add up (a worker's TopKCodec never sends any)
//
// decode_header() has checked the payload's size for its encoding; this checks what only the
// payload shows: every top-k index must fall inside the chunk. A bad one throws gradsync::Error
// saying which index and how many keys the chunk has, and nothing is applied (ShardState answers
// the worker with an ERROR).
//
// Memory: a decoded push is a fresh array of the chunk's floats, owned by the Buffer returned,
// so a sync shard holding pushes until every worker sent them holds as much as it would for
// fp32 pushes. Pure function; any thread.
#pragma once

#include "common/wire_format.h"
#include "server/message.h"

namespace gradsync {

Buffer decode_push(const wire::Header& header, const Buffer& payload);

}  // namespace gradsync
