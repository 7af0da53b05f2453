// The allreduce algorithms of the Gloo communicator (GlooOptions::algorithm), the sum each runs
// over Gloo, and the tag that keeps a collective's messages apart from another's:
//
//   const Algorithm algorithm = parse_algorithm(options.algorithm);   // ConfigError if unknown
//   allreduce_sum(context, algorithm, in, out, tag_of(work.what()), timeout);   // blocks
//
//   ring              gloo::allreduce, RING: reduce-scatter then all-gather, segments pipelined;
//                     its messages carry `tag`
//   ring_chunked      gloo::AllreduceRingChunked: the ring over 2N chunks, two in flight
//   halving_doubling  gloo::AllreduceHalvingDoubling: recursive halving then doubling
// The older two classes match their peers' messages by the context's slot counter, which every
// rank advances alike only while every rank constructs the same algorithms in the same order:
// the header check (gloo_header_check.h) keeps ranks that disagree away from them. Their waits
// use the pairs' timeout, set at joining, not `timeout`. Internal to allreduce/gloo/.
#pragma once

#include <gloo/context.h>

#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "allreduce/communicator.h"

namespace gradsync::gloo {

enum class Algorithm { kRing, kRingChunked, kHalvingDoubling };

// Gloo's ring_chunked and halving_doubling count bytes in an int.
inline constexpr std::size_t kMaxIntCountFloats = INT_MAX / sizeof(float);

// Throws gradsync::Error, said by `me` ("rank 3"), for an allreduce of `count` floats that
// `algorithm` cannot run (more than kMaxIntCountFloats outside the ring).
void check_allreduce_count(Algorithm algorithm, std::size_t count, const std::string& me);

// The names GlooOptions::algorithm accepts, in Algorithm's order (gloo_algorithms() in
// gloo_communicator.h).
const std::vector<std::string>& algorithm_names();
// The algorithm called `name`; a ConfigError for comm.algorithm listing the
// valid names otherwise.
Algorithm parse_algorithm(const std::string& name);
// "ring", "ring_chunked", "halving_doubling".
const std::string& algorithm_name(Algorithm algorithm);

// A collective's Gloo tag: a hash of its description, "collective #<seq> <operation, size, root,
// algorithm>". Ranks that issue the same collective compute the same tag; ranks that disagree
// (another size, operation or root) use different tags, so that the messages of the tagged
// algorithms (the ring, broadcast, allgather, barrier, the reduce-scatter ring) never meet even
// without the header check: each waits and times out. With equal tags Gloo would take the
// other's bytes, and a larger message than the receive expects fails an assertion on Gloo's
// event-loop thread, which ends the process. (Only one collective of a context is ever in
// flight, so tags need not be unique beyond it.)
std::uint32_t tag_of(const std::string& collective);

// The names GlooOptions::pairs accepts: async, sync, busy_poll.
const std::vector<std::string>& pair_mode_names();
// A ConfigError for comm.gloo_pairs when `pairs` is no mode, or a sync mode with an algorithm
// other than halving_doubling: gloo::allreduce's ring runs on unbound buffers, which sync pairs
// do not serve; ring_chunked keeps two messages in flight to its neighbour, and Gloo sizes a
// sync pair's send buffer for one, so every rank of the ring can block writing (measured: 20 s
// stalls at 3 and 4 ranks, ended only by the send timeout).
void check_pair_mode(const std::string& pairs, Algorithm algorithm);

// Sums `in` over every rank of `context` into `data`: each rank ends with the same bits. `in`
// may be `data` itself (in place). `piece` > 0 (sync pairs, GlooMesh::sync_message_floats()):
// halving_doubling runs once per piece of at most that many floats, so that no
// message outgrows what the kernel buffers. Every rank still ends with the same bits; for
// N >= 3 which rank's value is added first depends on the piece's length as it does on a
// buffer's, so non-integer sums may differ from one unsplit call in the last bits.
void allreduce_sum(const std::shared_ptr<::gloo::Context>& context, Algorithm algorithm,
                   std::span<const float> in, std::span<float> data, std::uint32_t tag,
                   std::chrono::milliseconds timeout, std::size_t piece = 0);

// Sums the 16-bit floats of `type` in `data` over every rank of `context`, in place, with
// gloo::allreduce's RING whatever `algorithm` the communicator runs for floats: that is the one
// of the three that takes a reduce function, and ours (allreduce/half_sum.h: each addition in
// fp32, rounded back to 16 bits) serves bf16, which Gloo has no type for, and fp16 with the
// rounding every other backend uses rather than gloo::float16's. Every rank ends with the same
// bits (the ring's all-gather copies the finished segments).
void allreduce_half_sum(const std::shared_ptr<::gloo::Context>& context, HalfType type,
                        std::span<std::uint16_t> data, std::uint32_t tag,
                        std::chrono::milliseconds timeout);

}  // namespace gradsync::gloo
