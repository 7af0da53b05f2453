#include "worker/clock_origin.h"

#include <cstdlib>

namespace gradsync {

std::optional<Clock::time_point> launcher_origin() {
  const char* text = std::getenv(kOriginEnv);
  if (text == nullptr) return std::nullopt;
  return Clock::time_point(std::chrono::nanoseconds(std::strtoll(text, nullptr, 10)));
}

}  // namespace gradsync
