// The parameter-server wire format: one fixed 48-byte little-endian header frame, then zero
// or one raw payload frame (floats, or UTF-8 text for errors). ZeroMQ multipart carries the
// frames, so a payload is never copied into a combined buffer.
//
//   offset size field
//        0    4 magic         "GSPS" (0x53505347 read as little-endian u32)
//        4    2 version       kWireVersion; a peer of another version is refused at HELLO
//        6    2 type          MessageType
//        8    4 sender        rank of a worker, or shard index of a server
//       12    4 aux           per type: HELLO world size; REPLY staleness; PUSHPULL the
//                              payload's encoding (PushEncoding); else 0
//       16    8 step          the worker's step (PUSH, PULL), the server's version (REPLY),
//                              the run's id (HELLO, HEARTBEAT: common/run_id.h)
//       24    8 key_begin     first parameter index of the range
//       32    8 key_end       one past the last
//       40    8 payload_bytes bytes in the payload frame: 4 * (key_end - key_begin) for floats
//
// Payloads: REPLY and INIT carry exactly 4 bytes per key of their range (fp32); a PUSHPULL as
// many as its encoding says (below); ERROR carries 1..4096 bytes of text; every other type
// carries none.
//
// Push encodings (comm.compression on ps): a PUSHPULL's aux says how its payload encodes the
// chunk's gradient. Only pushes are ever encoded: REPLY and INIT carry the parameters
// themselves, which a rounding would change for good.
//   0 fp32   4 bytes per key, the floats as they are
//   1 fp16   2 bytes per key, IEEE binary16 (common/compression/half_codec.h), not divided by N:
//            the shard decodes every push to fp32 before it sums
//   2 bf16   2 bytes per key, bfloat16 (the same header)
//   3 topk   k entries, 8 k bytes with 0 < k <= keys: k uint32 indices, each relative to
//            key_begin, then k float32 values (common/compression/top_k_codec.h); every key
//            not listed is 0. An empty range cannot be top-k (k > 0): it goes as fp32.
// The shard decodes each push into the chunk's dense fp32 gradient before its consistency rule
// sees it, and checks every top-k index against the chunk (decode_header cannot: it never sees
// the payload).
//
// Chunks: a shard's key range is cut into chunks of kChunkKeys keys from its first key, the last
// one shorter (an empty range is one empty chunk). A PUSHPULL carries exactly one chunk (its key
// range names it), so a worker sends its gradient of a shard's range as one PUSHPULL per chunk,
// in order, all with the same step; a REPLY also carries one chunk, and the REPLYs answering a
// PULL or a step tile the range in order. That is what lets a sync shard update and answer chunk
// c as soon as every worker pushed it, while chunk c + 1 is still arriving. INIT carries the
// whole range. Whether a range is one of the receiver's chunks depends on the shard's range, so
// the shard checks it (decode_header cannot).
//
// decode_header() checks every field that can be checked without context (magic, version,
// known type, key_begin <= key_end, a PUSHPULL's encoding, payload size consistent with the
// type, the encoding and the range, no more than kMaxPayloadBytes) and throws WireError saying
// which field is wrong; the shard then checks the range and the sender against what it owns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/error.h"

namespace gradsync::wire {

inline constexpr std::uint32_t kMagic = 0x53505347;  // "GSPS" in memory order
// 2: gradients are pushed chunk by chunk (version 1 pushed a shard's whole range at once).
// 3: HELLO and HEARTBEAT carry the run's id, and a shard refuses those of another run.
// 4: a PUSHPULL's aux names its payload's encoding (fp32, fp16, bf16, top-k): version 3 shards
//    would read an fp16 push as half as many floats and refuse it.
inline constexpr std::uint16_t kWireVersion = 4;
inline constexpr std::size_t kHeaderBytes = 48;
inline constexpr std::uint64_t kMaxPayloadBytes = std::uint64_t{1} << 33;  // 8 GiB
inline constexpr std::uint64_t kChunkKeys = std::uint64_t{1} << 17;        // 512 KiB of floats

enum class MessageType : std::uint16_t {
  kHello = 1,      // worker -> shard: rank, world size (aux), model size (key_end), run id (step)
  kHelloAck = 2,   // shard -> worker: the shard's key range, its version (step); no payload
  kPushPull = 3,   // worker -> shard: gradient of one chunk for `step`; reply: that chunk's params
  kPull = 4,       // worker -> shard: no payload; reply: params of the range
  kReply = 5,      // shard -> worker: params of the range (payload), staleness in aux
  kError = 6,      // either way: UTF-8 reason in the payload; the receiver fails naming it
  kHeartbeat = 7,  // worker -> shard: liveness, run id (step); no payload, no reply
  kBye = 8,        // worker -> shard: leaving cleanly; no payload, no reply
  kInit = 9,       // rank 0 -> shard: initial params of the range (payload); reply: kReply
};

// A PUSHPULL's payload encoding, in its aux (see "Push encodings" above).
enum class PushEncoding : std::uint32_t {
  kFp32 = 0,
  kFp16 = 1,
  kBf16 = 2,
  kTopK = 3,
};

struct Header {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kWireVersion;
  MessageType type = MessageType::kHello;
  std::uint32_t sender = 0;
  std::uint32_t aux = 0;
  std::uint64_t step = 0;
  std::uint64_t key_begin = 0;
  std::uint64_t key_end = 0;
  std::uint64_t payload_bytes = 0;

  // "PUSHPULL from 3 step 12 keys [0, 1024) payload 4096 B aux 0" for logs; an encoded
  // PUSHPULL adds its encoding: "... payload 2048 B aux 1 (fp16)".
  std::string to_string() const;

  // PUSHPULL: its payload's encoding (decode_header checked aux is one).
  PushEncoding encoding() const { return static_cast<PushEncoding>(aux); }
};

class WireError : public Error {
 public:
  using Error::Error;
};

// Little-endian encoding, independent of the host's byte order.
void encode_header(const Header& header, std::span<std::byte, kHeaderBytes> out);

// Throws WireError naming the field when `frame` is not a valid header (wrong size, magic,
// version, type, range, or payload size for the type).
Header decode_header(std::span<const std::byte> frame);

// Convenience for building messages.
Header make_header(MessageType type, std::uint32_t sender, std::uint64_t step,
                   std::uint64_t key_begin, std::uint64_t key_end, std::uint64_t payload_bytes,
                   std::uint32_t aux = 0);

const char* type_name(MessageType type);

// "fp32", "fp16", "bf16", "topk" (the comm.compression names); "UNKNOWN" for any other value.
const char* encoding_name(PushEncoding encoding);

// "[begin, end)": a key range as every message about one writes it.
std::string range_text(std::uint64_t begin, std::uint64_t end);

}  // namespace gradsync::wire
