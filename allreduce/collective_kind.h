// CollectiveKind: which collective a rank is in, as the backends that check for a desync put it
// on the wire (TcpRing's LinkHeader, MpiCommunicator's header allgather) and in messages.
//
//   LinkHeader h{.op = std::uint32_t(CollectiveKind::kAllreduceAvg), ...};
//   describe_collective(CollectiveKind::kBroadcast, 10, 2);   // "broadcast of 10 floats from ..."
//   half_allreduce_kind(HalfType::kBf16, ReduceOp::kAvg);     // kAllreduceBf16Avg
//   half_reduce_scatter_kind(HalfType::kFp16, ReduceOp::kSum); // kReduceScatterFp16Sum
//
// The values are a wire format within one job (every rank runs one build): append, never
// renumber. Header-only, no state.
#pragma once

#include <cstdint>
#include <string>

#include "allreduce/communicator.h"

namespace gradsync {

enum class CollectiveKind : std::uint32_t {
  kAllreduceSum = 1,
  kAllreduceAvg,
  kBroadcast,
  kAllgather,
  kBarrier,
  kReduceScatterSum,
  kReduceScatterAvg,
  // allreduce_half: the format and the op in the kind, so that a 16-bit allreduce meets neither
  // a float allreduce nor one of the other format without a desync error.
  kAllreduceFp16Sum,
  kAllreduceFp16Avg,
  kAllreduceBf16Sum,
  kAllreduceBf16Avg,
  // reduce_scatter_half: likewise, apart from a float reduce-scatter, the other format and the
  // 16-bit allreduces (whose count, the whole buffer, could equal its input's).
  kReduceScatterFp16Sum,
  kReduceScatterFp16Avg,
  kReduceScatterBf16Sum,
  kReduceScatterBf16Avg
};

// The kind of allreduce_half(type, op).
inline CollectiveKind half_allreduce_kind(HalfType type, ReduceOp op) {
  const bool avg = op == ReduceOp::kAvg;
  if (type == HalfType::kFp16) {
    return avg ? CollectiveKind::kAllreduceFp16Avg : CollectiveKind::kAllreduceFp16Sum;
  }
  return avg ? CollectiveKind::kAllreduceBf16Avg : CollectiveKind::kAllreduceBf16Sum;
}

// The kind of reduce_scatter_half(type, op).
inline CollectiveKind half_reduce_scatter_kind(HalfType type, ReduceOp op) {
  const bool avg = op == ReduceOp::kAvg;
  if (type == HalfType::kFp16) {
    return avg ? CollectiveKind::kReduceScatterFp16Avg : CollectiveKind::kReduceScatterFp16Sum;
  }
  return avg ? CollectiveKind::kReduceScatterBf16Avg : CollectiveKind::kReduceScatterBf16Sum;
}

// What a collective's elements are, for messages: "fp16 values", "bf16 values", else "floats".
inline const char* collective_elements(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllreduceFp16Sum:
    case CollectiveKind::kAllreduceFp16Avg:
    case CollectiveKind::kReduceScatterFp16Sum:
    case CollectiveKind::kReduceScatterFp16Avg:
      return "fp16 values";
    case CollectiveKind::kAllreduceBf16Sum:
    case CollectiveKind::kAllreduceBf16Avg:
    case CollectiveKind::kReduceScatterBf16Sum:
    case CollectiveKind::kReduceScatterBf16Avg:
      return "bf16 values";
    default:
      return "floats";
  }
}

// "allreduce", "reduce-scatter avg", ...; "unknown operation" for a value no build sends (what
// a corrupt or foreign header holds).
inline const char* collective_name(std::uint64_t kind) {
  if (kind > UINT32_MAX) return "unknown operation";
  switch (static_cast<CollectiveKind>(kind)) {
    case CollectiveKind::kAllreduceSum:
      return "allreduce";
    case CollectiveKind::kAllreduceAvg:
      return "allreduce avg";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kAllgather:
      return "allgather";
    case CollectiveKind::kBarrier:
      return "barrier";
    case CollectiveKind::kReduceScatterSum:
      return "reduce-scatter";
    case CollectiveKind::kReduceScatterAvg:
      return "reduce-scatter avg";
    case CollectiveKind::kAllreduceFp16Sum:
      return "allreduce fp16";
    case CollectiveKind::kAllreduceFp16Avg:
      return "allreduce fp16 avg";
    case CollectiveKind::kAllreduceBf16Sum:
      return "allreduce bf16";
    case CollectiveKind::kAllreduceBf16Avg:
      return "allreduce bf16 avg";
    case CollectiveKind::kReduceScatterFp16Sum:
      return "reduce-scatter fp16";
    case CollectiveKind::kReduceScatterFp16Avg:
      return "reduce-scatter fp16 avg";
    case CollectiveKind::kReduceScatterBf16Sum:
      return "reduce-scatter bf16";
    case CollectiveKind::kReduceScatterBf16Avg:
      return "reduce-scatter bf16 avg";
  }
  return "unknown operation";
}

// "allreduce of 1000 floats", "allreduce fp16 avg of 7 fp16 values" (broadcasts add "from rank
// R"; a barrier is just "barrier").
// `count` is the collective's total elements: an allgather's output, a reduce-scatter's input.
inline std::string describe_collective(CollectiveKind kind, std::uint64_t count, int root) {
  std::string text = collective_name(std::uint64_t(kind));
  if (kind == CollectiveKind::kBarrier) return text;
  text += " of " + std::to_string(count) + " " + collective_elements(kind);
  if (kind == CollectiveKind::kBroadcast) text += " from rank " + std::to_string(root);
  return text;
}

}  // namespace gradsync
