// Helpers the Gloo communicator's tests share (test_gloo_communicator.cpp: what the collectives
// compute; test_gloo_failures.cpp: how they fail): the options and noisy data (errors: error_checks.h).
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "allreduce/gloo/gloo_communicator.h"
#include "tests/support/error_checks.h"

namespace gradsync::testing {

inline gradsync::GlooOptions gloo_options(
    const std::string& algorithm = "ring",
    std::chrono::milliseconds timeout = std::chrono::seconds(20), bool check_desync = true) {
  gradsync::GlooOptions options;
  options.algorithm = algorithm;
  options.timeout = timeout;
  options.check_desync = check_desync;
  return options;
}

// Per rank, 0.1 (r + 1) / (i + 3): sums that round differently in different orders.
inline std::vector<float> noisy_data(int rank, std::size_t length) {
  std::vector<float> data(length);
  for (std::size_t i = 0; i < length; ++i) data[i] = 0.1f * float(rank + 1) / float(i + 3);
  return data;
}

}  // namespace gradsync::testing
