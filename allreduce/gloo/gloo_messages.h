// What the Gloo communicator makes of Gloo's exception messages, and the gradsync errors it turns
// them into (allreduce/gloo/*.cpp; header-only, no state).
//
//   without_source_prefix("[/build/gloo/pair.cc:589] Connection closed by peer [127.0.0.1]:4100")
//       == "Connection closed by peer [127.0.0.1]:4100"
//   std::rethrow_exception(peer_error<TimeoutError>(2, "127.0.0.1:4100", what, problem));
#pragma once

#include <exception>
#include <string>

#include "common/error.h"

namespace gradsync::gloo {

// Gloo prefixes its messages with "[<source file>:<line>] "; the file is Gloo's build path,
// noise in a gradsync error. (An address also starts with '[', but holds no '/'.)
inline std::string without_source_prefix(const std::string& message) {
  if (message.empty() || message[0] != '[') return message;
  const auto close = message.find("] ");
  if (close == std::string::npos || message.find('/') > close) return message;
  return message.substr(close + 2);
}

inline bool contains(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

// Whether a message from Gloo's own algorithms reports a timeout. Gloo has no exception type for
// one: its waits throw gloo::IoException both when they time out ("Timed out waiting 500ms for
// recv operation to complete") and when a pair fails, so only the text tells them apart. The
// waits this backend makes itself tell by their deadline instead (gloo_waits.h).
inline bool is_gloo_timeout(const std::string& message) {
  return contains(message, "Timed out") || contains(message, "timeout");
}

// PeerError or TimeoutError about `peer`; -1 (a peer Gloo's message does not name) takes
// PeerError's form for a peer that is no single rank.
template <typename E>
std::exception_ptr peer_error(int peer, const std::string& endpoint, const std::string& operation,
                              const std::string& problem) {
  if (peer >= 0) return std::make_exception_ptr(E(peer, endpoint, operation, problem));
  return std::make_exception_ptr(E("a peer", -1, "Gloo's message names none", operation, problem));
}

}  // namespace gradsync::gloo
