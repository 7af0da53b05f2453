#include "common/error.h"

namespace gradsync::detail {

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  throw Error(std::string(file) + ":" + std::to_string(line) + ": check '" + condition +
              "' failed: " + message);
}

}  // namespace gradsync::detail
