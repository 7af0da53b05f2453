// CollectiveKind: which collective a rank is in, as the backends that check for a desync put it
// on the wire (TcpRing's LinkHeader, MpiCommunicator's header allgather) and in messages.
//
//   LinkHeader h{.op = std::uint32_t(CollectiveKind::kAllreduceAvg), ...};
//   describe_collective(CollectiveKind::kBroadcast, 10, 2);   // "broadcast of 10 floats from ..."
//
// The values are a wire format within one job (every rank runs one build): append, never
// renumber. Header-only, no state.
#pragma once

#include <cstdint>
#include <string>

namespace gradsync {

enum class CollectiveKind : std::uint32_t {
  kAllreduceSum = 1,
  kAllreduceAvg,
  kBroadcast,
  kAllgather,
  kBarrier,
  kReduceScatterSum,
  kReduceScatterAvg
};

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
  }
  return "unknown operation";
}

// "allreduce of 1000 floats" (broadcasts add "from rank R"; a barrier is just "barrier").
// `count` is the collective's total elements: an allgather's output, a reduce-scatter's input.
inline std::string describe_collective(CollectiveKind kind, std::uint64_t count, int root) {
  std::string text = collective_name(std::uint64_t(kind));
  if (kind == CollectiveKind::kBarrier) return text;
  text += " of " + std::to_string(count) + " floats";
  if (kind == CollectiveKind::kBroadcast) text += " from rank " + std::to_string(root);
  return text;
}

}  // namespace gradsync
