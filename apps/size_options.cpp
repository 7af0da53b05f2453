#include "apps/size_options.h"

#include <string>

#include "common/error.h"
#include "experiments/bench/collective_bench.h"

namespace gradsync {
namespace {

constexpr std::size_t kMaxFloats = std::size_t{1} << 28;  // 1 GiB of payload

// CLI11 puts the flag in front of what a validator returns: "--floats: '1X' is not a size".
std::string size_problem(const std::string& text) {
  try {
    parse_size(text);
    return "";
  } catch (const ConfigError&) {
    return "'" + text + "' is not a size (examples: 512, 4K, 64M, 1G)";
  }
}

}  // namespace

CLI::Validator byte_size() { return CLI::Validator(size_problem, "SIZE"); }

CLI::Validator float_count() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        // parse_size reads a trailing B as bytes; here the unit is floats, so "4MB" is refused
        // rather than read as 4M floats (16 MiB).
        if (!text.empty() && (text.back() == 'B' || text.back() == 'b')) {
          return "'" + text + "': sizes count floats (1M, 16M), not bytes";
        }
        if (std::string problem = size_problem(text); !problem.empty()) return problem;
        const std::size_t floats = parse_size(text);
        if (floats == 0 || floats > kMaxFloats) {
          return "'" + text + "': from 1 float to 256M (1 GiB)";
        }
        return "";
      },
      "FLOATS");
}

}  // namespace gradsync
