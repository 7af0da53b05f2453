// The run's clock origin: `gradsync run` reads the monotonic clock once and hands the reading to
// every rank and shard it starts (kOriginEnv), so that their metrics' time_s and their trace
// spans share one time axis, exactly on one host (CLOCK_MONOTONIC is the host's).
#pragma once

#include <optional>

#include "common/stopwatch.h"

namespace gradsync {

// The environment variable with the launcher's clock origin (steady_clock nanoseconds).
inline constexpr const char* kOriginEnv = "GRADSYNC_ORIGIN_NS";

// That origin, when this process has one (gradsync run started it).
std::optional<Clock::time_point> launcher_origin();

}  // namespace gradsync
