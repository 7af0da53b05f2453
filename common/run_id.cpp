#include "common/run_id.h"

#include <cstdio>
#include <cstdlib>
#include <random>

#include "common/error.h"

namespace gradsync {

std::uint64_t draw_run_id() {
  std::random_device seed;
  std::uint64_t id = 0;
  while (id == 0) id = (std::uint64_t(seed()) << 32) ^ seed();
  return id;
}

std::string run_id_text(std::uint64_t id) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(id));
  return text;
}

std::optional<std::uint64_t> run_id_from_env() {
  const char* value = std::getenv(kRunIdEnv);
  if (value == nullptr) return std::nullopt;
  const std::string text = value;
  std::uint64_t id = 0;
  bool hex = !text.empty() && text.size() <= 16;
  for (const char c : text) {
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (digit < 0) hex = false;
    id = id << 4 | std::uint64_t(digit < 0 ? 0 : digit);
  }
  if (!hex || id == 0) {
    throw ConfigError("environment", kRunIdEnv,
                      "'" + text + "' is not a run id (1 to 16 hex digits, not all zero)");
  }
  return id;
}

std::uint64_t config_run_id(const std::string& config_text) {
  std::uint64_t hash = 14695981039346656037ull;
  for (const char c : config_text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash == 0 ? 1 : hash;
}

std::uint64_t run_id_for(const std::string& config_yaml) {
  return run_id_from_env().value_or(config_run_id(config_yaml));
}

}  // namespace gradsync
