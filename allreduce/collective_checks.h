// Argument checks that every Communicator backend makes at the call, before it queues anything,
// so that one mistake reads the same whichever backend catches it.
//
//   check_reduce_scatter_sizes(in.size(), out.size(), size_);   // in reduce_scatter_async
//   check_reduce_scatter_half_sizes(in.size(), out.size(), size_, type);   // and its 16-bit form
//
// Each throws gradsync::Error the way GRADSYNC_CHECK does, naming the caller's file and line (not
// this header's). Header-only, no state, any thread.
#pragma once

#include <cstddef>
#include <source_location>
#include <string>

#include "allreduce/communicator.h"
#include "common/error.h"

namespace gradsync {
namespace detail {

// The reduce-scatter size check behind both forms: `operation` and `elements` make the message.
inline void check_reduce_scatter_counts(const char* operation, const char* elements,
                                        std::size_t in_size, std::size_t out_size, int ranks,
                                        const std::source_location& where) {
  if (in_size == out_size * std::size_t(ranks)) return;
  detail::check_failed(where.file_name(), int(where.line()), "in.size() == size() * out.size()",
                       std::string(operation) +
                           ": in.size() must be size() * out.size(), but in has " +
                           std::to_string(in_size) + " " + elements + ", out " +
                           std::to_string(out_size) + ", over " + std::to_string(ranks) + " ranks");
}

}  // namespace detail

// reduce_scatter_async's contract (allreduce/communicator.h): in.size() == size() * out.size().
// Sizes that disagree across ranks are no business of this check: each backend catches those as
// a mismatched collective.
inline void check_reduce_scatter_sizes(
    std::size_t in_size, std::size_t out_size, int ranks,
    std::source_location where = std::source_location::current()) {
  detail::check_reduce_scatter_counts("reduce_scatter", "floats", in_size, out_size, ranks, where);
}

// reduce_scatter_half_async's, the same with 16-bit values: "... but in has 9 bf16 values, ...".
inline void check_reduce_scatter_half_sizes(
    std::size_t in_size, std::size_t out_size, int ranks, HalfType type,
    std::source_location where = std::source_location::current()) {
  const std::string elements = std::string(half_type_name(type)) + " values";
  detail::check_reduce_scatter_counts("reduce_scatter_half", elements.c_str(), in_size, out_size,
                                      ranks, where);
}

// allreduce_into_async's contract (allreduce/communicator.h): as many floats out as in, and
// either the same buffer (in place) or two that do not overlap.
inline void check_allreduce_into_buffers(
    const float* in, std::size_t in_size, const float* out, std::size_t out_size,
    std::source_location where = std::source_location::current()) {
  if (in_size != out_size) {
    detail::check_failed(where.file_name(), int(where.line()), "in.size() == out.size()",
                         "allreduce_into: in has " + std::to_string(in_size) + " floats, out " +
                             std::to_string(out_size) + "; they must be equal");
  }
  if (in != out && in < out + out_size && out < in + in_size) {
    detail::check_failed(where.file_name(), int(where.line()), "in == out || no overlap",
                         "allreduce_into: in and out overlap without being the same buffer");
  }
}

}  // namespace gradsync
