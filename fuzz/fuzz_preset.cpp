// libFuzzer target: the preset loader (experiments/preset.h) and its `--set` overrides.
//
// Input layout: YAML text, then optionally NUL-separated `key=value` overrides (at most four),
// so one input exercises both the file and the command-line path:
//   "strategy: dp\nworkers: 2\n" "\0" "train.lr=0.5" "\0" "model.hidden=64,64"
// The loader must throw ConfigError or return at least one run; every run it returns must
// survive the round trip that results/<run>/config.yaml relies on (preset.h: "Loading it back
// with load_preset_text gives the same Config"), compared through to_yaml().
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "experiments/preset.h"
#include "fuzz/fuzz_support.h"

namespace {

constexpr std::size_t kMaxOverrides = 4;

void check_round_trip(const gradsync::Config& config) {
  const std::string yaml = gradsync::to_yaml(config);
  gradsync::Preset again;
  try {
    again = gradsync::load_preset_text(yaml, "config.yaml", {});
  } catch (const gradsync::Error& e) {
    GRADSYNC_FUZZ_REQUIRE(false, std::string("to_yaml output does not load back: ") + e.what() +
                                     "\n--- to_yaml ---\n" + yaml);
  }
  GRADSYNC_FUZZ_REQUIRE(again.runs.size() == 1, yaml);
  const std::string yaml_again = gradsync::to_yaml(again.runs[0]);
  GRADSYNC_FUZZ_REQUIRE(yaml_again == yaml, "config changed in the round trip\n--- first ---\n" +
                                                yaml + "--- reloaded ---\n" + yaml_again);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::size_t end = input.find('\0');
  const std::string yaml(input.substr(0, end));
  std::vector<std::string> overrides;
  while (end != std::string_view::npos && overrides.size() < kMaxOverrides) {
    const std::size_t start = end + 1;
    end = input.find('\0', start);
    overrides.emplace_back(input.substr(start, end == std::string_view::npos ? end : end - start));
  }

  gradsync::fuzz::expect_only_gradsync_errors<gradsync::ConfigError>([&] {
    const gradsync::Preset preset = gradsync::load_preset_text(yaml, "fuzz.yaml", overrides);
    GRADSYNC_FUZZ_REQUIRE(!preset.runs.empty(), "a preset with no runs");
    for (const gradsync::Config& config : preset.runs) check_round_trip(config);
  });
  return 0;
}
