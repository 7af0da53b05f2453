#include "allreduce/gloo/gloo_algorithms.h"

#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/math.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <type_traits>
#include <vector>

#include "allreduce/half_sum.h"
#include "common/error.h"

namespace gradsync::gloo {
namespace {

// gloo::sum<float> has overloads; this is the (out, a, b, n) one that AllreduceOptions wants.
void sum_floats(void* out, const void* a, const void* b, std::size_t n) {
  ::gloo::sum<float>(out, a, b, n);
}

// (out, a, b, n) over n 16-bit values: out may be a (Gloo reduces into its own buffer).
void sum_fp16(void* out, const void* a, const void* b, std::size_t n) {
  add_halves(HalfType::kFp16, static_cast<const std::uint16_t*>(a),
             static_cast<const std::uint16_t*>(b), static_cast<std::uint16_t*>(out), n);
}

void sum_bf16(void* out, const void* a, const void* b, std::size_t n) {
  add_halves(HalfType::kBf16, static_cast<const std::uint16_t*>(a),
             static_cast<const std::uint16_t*>(b), static_cast<std::uint16_t*>(out), n);
}

}  // namespace

const std::vector<std::string>& algorithm_names() {
  // All three are in Debian's snapshot (0.0~git20220518): gloo::allreduce with RING, and the
  // AllreduceRingChunked and AllreduceHalvingDoubling class templates. Algorithm's order.
  static const std::vector<std::string> names = {"ring", "ring_chunked", "halving_doubling"};
  return names;
}

Algorithm parse_algorithm(const std::string& name) {
  const auto& names = algorithm_names();
  const auto found = std::find(names.begin(), names.end(), name);
  if (found == names.end()) {
    std::string valid;
    for (const auto& n : names) valid += (valid.empty() ? "" : ", ") + n;
    throw ConfigError("comm", "comm.algorithm",
                      "unknown algorithm '" + name + "' (valid for gloo: " + valid + ")");
  }
  return static_cast<Algorithm>(found - names.begin());
}

const std::string& algorithm_name(Algorithm algorithm) {
  return algorithm_names()[std::size_t(algorithm)];
}

void check_allreduce_count(Algorithm algorithm, std::size_t count, const std::string& me) {
  if (algorithm == Algorithm::kRing || count <= kMaxIntCountFloats) return;
  throw Error(me + ": gloo " + algorithm_name(algorithm) + " reduces at most " +
              std::to_string(kMaxIntCountFloats) + " floats at once (Gloo counts its bytes in an " +
              "int); this allreduce has " + std::to_string(count) + ": use the ring");
}

std::uint32_t tag_of(const std::string& collective) {
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a, 64 bits, folded to 32
  for (const char c : collective) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return static_cast<std::uint32_t>(hash ^ (hash >> 32));
}

const std::vector<std::string>& pair_mode_names() {
  static const std::vector<std::string> names = {"async", "sync", "busy_poll"};
  return names;
}

void check_pair_mode(const std::string& pairs, Algorithm algorithm) {
  const auto& names = pair_mode_names();
  if (std::find(names.begin(), names.end(), pairs) == names.end()) {
    throw ConfigError("comm", "comm.gloo_pairs",
                      "unknown mode '" + pairs + "' (valid: async, sync, busy_poll)");
  }
  if (pairs == "async" || algorithm == Algorithm::kHalvingDoubling) return;
  const std::string why =
      algorithm == Algorithm::kRing
          ? "gloo's ring runs on unbound buffers, which only async pairs serve"
          : "ring_chunked keeps two messages in flight to a peer, and Gloo sizes a sync pair's "
            "send buffer for one: the ranks of a ring can all block writing";
  throw ConfigError("comm", "comm.gloo_pairs",
                    pairs + " pairs take halving_doubling only (comm.algorithm): " + why);
}

namespace {

// The slots each construction takes from the context's counter (Gloo's own reservations):
// halving_doubling 2N(N-1), ring_chunked 3.
template <typename GlooAlgorithm>
std::int64_t slots_per_construction(int n) {
  if constexpr (std::is_same_v<GlooAlgorithm, ::gloo::AllreduceHalvingDoubling<float>>) {
    return 2 * std::int64_t(n) * (n - 1);
  }
  (void)n;
  return 3;
}

// ring_chunked and halving_doubling over `data` in place, one piece of at most `piece` floats
// at a time (0: all at once). Each construction takes slots from the context's counter on every
// rank alike: every rank cuts the same pieces. That counter is an int: a run that would wrap it
// (its old slots would meet buffers still registered, or worse) is refused first, in words.
template <typename GlooAlgorithm>
void run_in_pieces(const std::shared_ptr<::gloo::Context>& context, std::span<float> data,
                   std::size_t piece) {
  if (piece == 0) piece = data.size();
  const std::int64_t pieces = std::int64_t((data.size() + piece - 1) / piece);
  const std::int64_t need = pieces * slots_per_construction<GlooAlgorithm>(context->size);
  const std::int64_t taken = context->nextSlot();  // every rank probes alike
  if (taken + need > INT_MAX) {
    throw Error("gloo: this allreduce's " + std::to_string(pieces) + " Gloo calls need " +
                std::to_string(need) + " slots of Gloo's int slot counter, and " +
                std::to_string(taken) + " of " + std::to_string(INT_MAX) +
                " are taken: larger pieces (net.core.wmem_max) or comm.gloo_pairs async take "
                "fewer");
  }
  for (std::size_t at = 0; at < data.size(); at += piece) {
    const std::size_t count = std::min(piece, data.size() - at);
    std::vector<float*> pointers = {data.data() + at};
    GlooAlgorithm algorithm(context, pointers, int(count));
    algorithm.run();
  }
}

}  // namespace

void allreduce_sum(const std::shared_ptr<::gloo::Context>& context, Algorithm algorithm,
                   std::span<const float> in, std::span<float> data, std::uint32_t tag,
                   std::chrono::milliseconds timeout, std::size_t piece) {
  switch (algorithm) {
    case Algorithm::kRing: {
      // In place: without an input buffer, Gloo reduces the output buffer itself. Out of place
      // Gloo reads the input where its ring needs it (it only reads it; the setter takes a
      // non-const pointer all the same).
      ::gloo::AllreduceOptions opts(context);
      opts.setAlgorithm(::gloo::AllreduceOptions::Algorithm::RING);
      if (in.data() != data.data()) opts.setInput(const_cast<float*>(in.data()), in.size());
      opts.setOutput(data.data(), data.size());
      opts.setReduceFunction(sum_floats);
      opts.setTag(tag);
      opts.setTimeout(timeout);
      ::gloo::allreduce(opts);
      return;
    }
    // These two reduce their buffer in place only: out of place, the input is copied first.
    case Algorithm::kRingChunked: {
      if (in.data() != data.data()) std::memcpy(data.data(), in.data(), in.size_bytes());
      run_in_pieces<::gloo::AllreduceRingChunked<float>>(context, data, piece);
      return;
    }
    case Algorithm::kHalvingDoubling: {
      if (in.data() != data.data()) std::memcpy(data.data(), in.data(), in.size_bytes());
      run_in_pieces<::gloo::AllreduceHalvingDoubling<float>>(context, data, piece);
      return;
    }
  }
}

void allreduce_half_sum(const std::shared_ptr<::gloo::Context>& context, HalfType type,
                        std::span<std::uint16_t> data, std::uint32_t tag,
                        std::chrono::milliseconds timeout) {
  ::gloo::AllreduceOptions opts(context);
  opts.setAlgorithm(::gloo::AllreduceOptions::Algorithm::RING);
  // In place, 2 bytes an element: Gloo's ring cuts its segments by elementSize.
  opts.setOutput(data.data(), data.size());
  opts.setReduceFunction(type == HalfType::kFp16 ? sum_fp16 : sum_bf16);
  opts.setTag(tag);
  opts.setTimeout(timeout);
  ::gloo::allreduce(opts);
}

}  // namespace gradsync::gloo
