// What the fuzz targets share: which exceptions count as a clean rejection, and how a broken
// promise is reported.
//
// Each target calls one parser with arbitrary bytes. A gradsync::Error (or a subclass) is the
// project's way of saying "bad input" (docs/errors.md), so it ends the input quietly; anything
// else (another exception type, a crash, a sanitizer report, a failed GRADSYNC_FUZZ_REQUIRE)
// reaches libFuzzer, which saves the input and stops. An uncaught exception is left to
// propagate on purpose: std::terminate aborts, and libFuzzer reports the abort as a crash.
//
// GRADSYNC_FUZZ_STRICT=1 in the environment narrows "clean" to the exception type the parser's
// header promises (WireError, DataError, ConfigError): a plain gradsync::Error from a
// GRADSYNC_CHECK then counts as a finding, since user input should never trip an invariant.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/error.h"

namespace gradsync::fuzz {

// Aborts with the condition and the file:line, so libFuzzer keeps the input as a crash.
#define GRADSYNC_FUZZ_REQUIRE(cond, what)                                             \
  do {                                                                                \
    if (!(cond)) ::gradsync::fuzz::broken_promise(__FILE__, __LINE__, #cond, (what)); \
  } while (0)

[[noreturn]] inline void broken_promise(const char* file, int line, const char* condition,
                                        const std::string& what) {
  std::fprintf(stderr, "%s:%d: GRADSYNC_FUZZ_REQUIRE(%s) failed: %s\n", file, line, condition,
               what.c_str());
  std::abort();
}

inline bool strict() {
  static const bool value = [] {
    const char* text = std::getenv("GRADSYNC_FUZZ_STRICT");
    return text != nullptr && std::string(text) == "1";
  }();
  return value;
}

// Runs `parse`; returns quietly on `Expected` (the documented error type) and, unless strict,
// on any other gradsync::Error. Everything else propagates.
template <typename Expected, typename Parse>
void expect_only_gradsync_errors(Parse&& parse) {
  try {
    parse();
  } catch (const Expected&) {
  } catch (const Error& e) {
    if (strict()) broken_promise(__FILE__, __LINE__, "documented error type", e.what());
  }
}

}  // namespace gradsync::fuzz
