#include "strategies/ps/push_encoder.h"

#include <atomic>

#include "common/compression/half_codec.h"
#include "common/error.h"

namespace gradsync {

using wire::PushEncoding;

PushEncoder::PushEncoder(PushCompression options) : options_(std::move(options)) {
  const std::string& method = options_.method;
  if (method == "fp16") {
    encoding_ = PushEncoding::kFp16;
  } else if (method == "bf16") {
    encoding_ = PushEncoding::kBf16;
  } else if (method == "topk") {
    encoding_ = PushEncoding::kTopK;
    compression::TopKCodec::k_for(1, options_.topk_ratio);  // throws for a ratio outside (0, 1]
  } else if (method == "powersgd") {
    throw Error(
        "comm.compression: powersgd needs an all-reduce of P and Q among the workers; ps "
        "pushes take none, fp16, bf16 or topk");
  } else if (method != "none") {
    throw Error("comm.compression: unknown method '" + method +
                "' for ps pushes (none, fp16, bf16, topk)");
  }
}

PushEncoder::Wire& PushEncoder::free_wire(Slot& slot) {
  // use_count() == 1: no Buffer of an earlier step holds the array any more. The last one may
  // have been released on ZeroMQ's I/O thread after it sent the bytes (an acq_rel decrement);
  // the acquire fence orders this step's writes after those reads, as in ParamStore.
  if (slot.wire && slot.wire.use_count() == 1) {
    std::atomic_thread_fence(std::memory_order_acquire);
  } else {
    slot.wire = std::make_shared<Wire>();
  }
  return *slot.wire;
}

PushEncoder::Encoded PushEncoder::encode(std::uint64_t step, KeyRange keys,
                                         std::span<const float> grads) {
  GRADSYNC_CHECK(keys.end <= grads.size(),
                 "PushEncoder: chunk " + wire::range_text(keys.begin, keys.end) +
                     " outside a gradient of " + std::to_string(grads.size()) + " floats");
  const std::span<const float> chunk = grads.subspan(keys.begin, keys.size());
  const bool warm_up = static_cast<std::int64_t>(step) < options_.start_step;
  // Top-k needs k > 0 entries (wire_format.h): an empty chunk has none to send.
  if (encoding_ == PushEncoding::kFp32 || warm_up || chunk.empty()) {
    return {PushEncoding::kFp32, Buffer{std::as_bytes(chunk), nullptr}};
  }
  Slot& slot = slots_[keys.begin];
  Wire& out = free_wire(slot);
  std::span<const std::byte> bytes;
  if (encoding_ == PushEncoding::kTopK) {
    if (!slot.top_k) slot.top_k = std::make_unique<compression::TopKCodec>(chunk.size());
    GRADSYNC_CHECK(slot.top_k->size() == chunk.size(), "PushEncoder: a chunk changed size");
    slot.top_k->select(chunk, options_.topk_ratio, slot.sparse);
    // The wire layout: k indices (relative to the chunk's first key, as select() numbers them),
    // then k values, bit-copied into one array so they leave as one frame.
    const std::size_t k = slot.sparse.indices.size();
    out.entries.resize(2 * k);
    compression::pack_words(slot.sparse, out.entries);
    bytes = std::as_bytes(std::span<const std::uint32_t>(out.entries));
  } else {
    out.halves.resize(chunk.size());
    compression::encode_half(encoding_, chunk, out.halves);  // kFp16 or kBf16 here
    bytes = std::as_bytes(std::span<const std::uint16_t>(out.halves));
  }
  return {encoding_, Buffer{bytes, slot.wire}};
}

}  // namespace gradsync
