// What a failing call said, for tests that check how collectives fail (TcpRing, Gloo, the
// host-staged GPU communicator): the message of the exception it threw, and a substring test.
#pragma once

#include <doctest/doctest.h>

#include <string>

namespace gradsync::testing {

// The message of the E that `call` throws; a failed check saying `expected` if it throws none.
template <typename E, typename F>
std::string error_of(F&& call, const std::string& expected) {
  try {
    call();
  } catch (const E& e) {
    return e.what();
  }
  FAIL_CHECK(expected);
  return "";
}

inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace gradsync::testing
