// The typed-key machinery behind presets: a KeySpec describes one dotted key (type, range, where
// it lives in Config) and assign()/format_value() convert between YAML nodes and Config fields.
// The table of keys itself is experiments/preset_schema.cpp; this header is private to
// the experiments library (it exposes yaml-cpp types).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "common/config.h"

namespace gradsync::yaml_schema {

// The `where` of everything that comes from the command line.
inline constexpr char kSetSource[] = "--set";

enum class Type { kInteger, kNumber, kString, kBool, kIntList, kChoice };

// "integer", "number", ... as describe_keys prints them.
const char* type_name(Type type);

using Field = std::variant<int*, std::int64_t*, std::uint64_t*, double*, bool*, std::string*,
                           std::vector<int>*>;

// The allowed interval of a numeric value (of each element, for lists). An integer key is also
// bounded by its field's type: a side left infinite here is the type's own limit (train.seed is
// any 64-bit unsigned integer), printed exactly by range_text(KeySpec).
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  bool hi_open = false;
  bool or_zero = false;  // 0 is allowed besides the interval (0 meaning "off")
};
constexpr Range kUnbounded{};
constexpr Range at_least(double lo) { return {.lo = lo}; }                // [lo, inf)
constexpr Range above(double lo) { return {.lo = lo, .lo_open = true}; }  // (lo, inf)
constexpr Range at_least_below(double lo, double hi) {                    // [lo, hi)
  return {.lo = lo, .hi = hi, .hi_open = true};
}
constexpr Range above_at_most(double lo, double hi) {  // (lo, hi]
  return {.lo = lo, .hi = hi, .lo_open = true};
}
constexpr Range between(double lo, double hi) { return {.lo = lo, .hi = hi}; }  // [lo, hi]
// 0, or a value in [lo, hi]: for a key whose 0 switches a feature off and whose smallest
// meaningful value is far above 0 (a link of 1e-300 Gbit/s would overflow every clock).
constexpr Range zero_or_between(double lo, double hi) {
  return {.lo = lo, .hi = hi, .or_zero = true};
}

// A function, not a list, so that strategies added to the factory later appear without edits.
using Choices = const std::vector<std::string>& (*)();

struct KeySpec {
  const char* key;  // dotted, as in YAML and --set
  Type type;
  Range range;
  const char* description;
  Field (*field)(Config&);
  Choices choices = nullptr;  // Type::kChoice only
  bool run_only = false;      // allowed only inside a runs entry
  bool preset_wide = false;  // one value for the whole preset: top level or --set, not a runs entry
};

// Parses `value` into the spec's field of `config`. Throws ConfigError(where, spec.key, problem);
// list elements are located by their own line in `source` ("--set" stays "--set").
void assign(const KeySpec& spec, const YAML::Node& value, const std::string& source,
            const std::string& where, Config* config);

// The value as YAML that assign() reads back to the same value.
std::string format_value(const Field& field);

// "in [0, 1)", ">= 1", "0 or in [0.001, 10000]", or "" for no limit. Whole bounds print whole
// ("100000000", not "1e+08").
std::string range_text(const Range& range);

// The range a key accepts: its declared Range within its field's type ("in [0,
// 18446744073709551615]" for train.seed); what describe_keys prints and every range error says.
std::string range_text(const KeySpec& spec);

// A string as a YAML scalar: plain where that reads back the same, else double-quoted.
std::string quote(const std::string& text);

// "'text'" for a scalar, else "a list" / "a map" / "nothing": for "expected X, got Y".
std::string describe_node(const YAML::Node& node);

// "file:line" (1-based) for a node's mark; just `source` for --set or a node without a mark.
std::string location(const std::string& source, const YAML::Mark& mark);

std::string join(const std::vector<std::string>& items);  // "a, b, c"

}  // namespace gradsync::yaml_schema
