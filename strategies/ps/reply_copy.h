// How a PsClient copies each REPLY chunk into the caller's parameters.
//
//   const ReplyCopy copy(model_bytes);         // decides once, from the model's size
//   copy(params + key_begin, payload, bytes);  // per chunk
//
// A model larger than the last-level cache cannot stay cached until the next forward pass:
// its later chunks evict its earlier ones. For such a model the copy uses non-temporal stores,
// which write whole lines without first reading each destination line into the cache (with
// the source cached, as a chunk just received is, that read is half of the copy's memory
// traffic) and leave the cache to the chunks still arriving. A model that fits is copied with
// memcpy, so the forward pass finds it cached. At 16M floats (64 MiB, twice this machine's L3)
// `gradsync bench ps --floats 16M --round-seconds 0.4` ran the round trip in 35.2, 35.7 and
// 33.2 ms against 36.5, 38.6 and 37.3 ms with memcpy (alternating runs).
// Without SSE2 (not x86-64) it always uses memcpy. Stateless after construction: any thread.
#pragma once

#include <cstddef>

namespace gradsync {

// The size of the largest cache of CPU 0 (sysfs, else sysconf), 0 when neither knows it.
// sysfs comes first: glibc's sysconf read 320 MiB on a virtual machine whose L3 is 32 MiB.
std::size_t last_level_cache_bytes();

class ReplyCopy {
 public:
  // Streams when model_bytes exceeds cache_bytes (never when cache_bytes is 0: unknown).
  // The default reads sysfs: construct once per client, not per chunk.
  explicit ReplyCopy(std::size_t model_bytes, std::size_t cache_bytes = last_level_cache_bytes());

  bool streaming() const { return streaming_; }
  // dst must not overlap src; neither needs any alignment beyond float's.
  void operator()(float* dst, const void* src, std::size_t bytes) const;

 private:
  bool streaming_;
};

}  // namespace gradsync
