#include "common/error.h"

#include <cstdio>

namespace gradsync {

std::string seconds_text(std::chrono::duration<double> d) {
  char text[32];
  // Three digits below 100 s, whole seconds above: never "1.2e+03 s".
  std::snprintf(text, sizeof(text), d.count() < 100 ? "%.3g s" : "%.0f s", d.count());
  return text;
}

}  // namespace gradsync

namespace gradsync::detail {

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  throw Error(std::string(file) + ":" + std::to_string(line) + ": check '" + condition +
              "' failed: " + message);
}

}  // namespace gradsync::detail
