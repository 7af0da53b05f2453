// Loads presets from text in unit tests, and catches the one-line error a bad one gives.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "experiments/preset.h"

namespace gradsync::testing {

inline constexpr char kFile[] = "presets/x.yaml";

inline Preset load(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  return load_preset_text(yaml, kFile, sets);
}

// The message of the ConfigError that loading throws (fails the test if none is thrown).
inline std::string error_of(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    load(yaml, sets);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("no ConfigError for: " << yaml);
  return "";
}

inline constexpr char kSynthetic[] = "data: {kind: synthetic}\n";

}  // namespace gradsync::testing
