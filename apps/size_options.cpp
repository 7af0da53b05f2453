#include "apps/size_options.h"

#include <optional>
#include <string>

#include "bench/collective_bench.h"
#include "common/error.h"

namespace gradsync {
namespace {

// parse_size's value, or nothing when the text is not a size.
std::optional<std::size_t> parsed_size(const std::string& text) {
  try {
    return parse_size(text);
  } catch (const ConfigError&) {
    return std::nullopt;
  }
}

// CLI11 puts the flag in front of what a validator returns: "--floats: '1X' is not a size".
std::string not_a_size(const std::string& text) {
  return "'" + text + "' is not a size (examples: 512, 4K, 64M, 1G)";
}

}  // namespace

CLI::Validator byte_size(std::size_t min_bytes) {
  return CLI::Validator(
      [min_bytes](const std::string& text) -> std::string {
        const std::optional<std::size_t> bytes = parsed_size(text);
        if (!bytes) return not_a_size(text);
        if (*bytes < min_bytes) {
          return "'" + text + "': at least " + std::to_string(min_bytes) +
                 (min_bytes == 1 ? " byte" : " bytes");
        }
        return "";
      },
      "SIZE");
}

CLI::Validator float_count(std::uint64_t max_floats) {
  return CLI::Validator(
      [max_floats](const std::string& text) -> std::string {
        // parse_size reads a trailing B as bytes; here the unit is floats, so "4MB" is refused
        // rather than read as 4M floats (16 MiB).
        if (!text.empty() && (text.back() == 'B' || text.back() == 'b')) {
          return "'" + text + "': sizes count floats (1M, 16M), not bytes";
        }
        const std::optional<std::size_t> floats = parsed_size(text);
        if (!floats) return not_a_size(text);
        if (*floats == 0 || *floats > max_floats) {
          return "'" + text + "': from 1 float to " + std::to_string(max_floats);
        }
        return "";
      },
      "FLOATS");
}

}  // namespace gradsync
