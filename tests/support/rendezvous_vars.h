// Reading launch/rendezvous_env.h's environment from a map in unit tests, and catching the
// one-line ConfigError a bad variable gives.
#pragma once

#include <doctest/doctest.h>

#include <map>
#include <optional>
#include <string>

#include "common/error.h"
#include "launch/rendezvous_env.h"

namespace gradsync::testing {

using Vars = std::map<std::string, std::string>;

inline RendezvousEnv read(const Vars& vars) {
  return read_rendezvous_env([&](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  });
}

// `base` with `changes` set over it.
inline Vars with(Vars base, const Vars& changes) {
  for (const auto& [name, value] : changes) base.insert_or_assign(name, value);
  return base;
}

// The whole message of the ConfigError that reading `vars` throws, and the variable it names.
struct Failure {
  std::string key;
  std::string message;
};

inline Failure failure(const Vars& vars) {
  try {
    read(vars);
  } catch (const ConfigError& e) {
    CHECK(e.where() == "environment");
    return {e.key(), e.what()};
  }
  FAIL("no ConfigError");
  return {};
}

}  // namespace gradsync::testing
