// Every numeric key of the schema has a range bounded on both sides, refuses a value just past
// either end in one line naming the key and that range, and accepts the ends themselves. Driven
// by the schema table itself (experiments/preset_schema.cpp), so a key added later is checked
// without an edit here.
#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "experiments/preset_schema.h"
#include "experiments/yaml_schema.h"
#include "tests/support/preset_text.h"
#include "worker/run_plan.h"

namespace gradsync {
namespace {

using testing::error_of;
using testing::kSynthetic;
using testing::load;
using yaml_schema::KeySpec;
using yaml_schema::Range;
using yaml_schema::range_text;
using yaml_schema::Type;

bool numeric(const KeySpec& spec) {
  return spec.type == Type::kInteger || spec.type == Type::kNumber || spec.type == Type::kIntList;
}

// Long double holds every integer of magnitude up to 2^64 exactly (a 64-bit or wider mantissa),
// one past either end of a uint64 or int64 included.
std::string integer_text(long double value) {
  char text[48];
  std::snprintf(text, sizeof text, "%.0Lf", value);
  return text;
}

std::string number_text(double value) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

// A key's values at and just past each end of its range, as --set text.
struct Ends {
  std::vector<std::string> inside;   // the closed ends
  std::vector<std::string> outside;  // one step past each end
};

// An integer key's ends: the declared ones, within its type's own limits.
template <typename T>
Ends integer_ends(const Range& r) {
  static_assert(LDBL_MANT_DIG >= 64, "one past 2^64 - 1 must be exact");
  const double type_lo = static_cast<double>(std::numeric_limits<T>::min());
  const double type_hi = static_cast<double>(std::numeric_limits<T>::max());
  const bool declared_lo = r.lo > type_lo, declared_hi = r.hi < type_hi;
  // Each branch converted on its own: a shared double would round 2^64 - 1 up.
  const long double lo = declared_lo ? static_cast<long double>(r.lo)
                                     : static_cast<long double>(std::numeric_limits<T>::min());
  const long double hi = declared_hi ? static_cast<long double>(r.hi)
                                     : static_cast<long double>(std::numeric_limits<T>::max());
  const bool lo_open = declared_lo && r.lo_open, hi_open = declared_hi && r.hi_open;
  Ends ends;
  ends.inside.push_back(integer_text(lo_open ? lo + 1 : lo));
  ends.inside.push_back(integer_text(hi_open ? hi - 1 : hi));
  ends.outside.push_back(integer_text(lo_open ? lo : lo - 1));
  ends.outside.push_back(integer_text(hi_open ? hi : hi + 1));
  return ends;
}

Ends number_ends(const Range& r) {
  Ends ends;
  if (!r.lo_open) ends.inside.push_back(number_text(r.lo));
  if (!r.hi_open) ends.inside.push_back(number_text(r.hi));
  ends.outside.push_back(number_text(r.lo_open ? r.lo : r.lo - (r.lo > 0 ? r.lo / 2 : 1)));
  ends.outside.push_back(number_text(r.hi_open ? r.hi : (r.hi > 0 ? r.hi * 2 : r.hi + 1)));
  return ends;
}

Ends ends_of(const KeySpec& spec) {
  Config scratch;
  return std::visit(
      [&](auto* field) -> Ends {
        using T = std::remove_pointer_t<decltype(field)>;
        if constexpr (std::is_same_v<T, std::vector<int>>) {
          return integer_ends<int>(spec.range);
        } else if constexpr (std::is_same_v<T, double>) {
          return number_ends(spec.range);
        } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          return integer_ends<T>(spec.range);
        } else {
          FAIL("a numeric key with a field of another type: " << spec.key);
          return {};
        }
      },
      spec.field(scratch));
}

bool is_unsigned_field(const KeySpec& spec) {
  Config scratch;
  return std::holds_alternative<std::uint64_t*>(spec.field(scratch));
}

}  // namespace

TEST_CASE("preset ranges: every numeric key is bounded on both sides, counts by the schema") {
  int numeric_keys = 0;
  for (const KeySpec& spec : preset_schema()) {
    if (!numeric(spec)) continue;
    ++numeric_keys;
    CAPTURE(spec.key);
    const std::string range = range_text(spec);
    // "in [lo, hi]" or "0 or in [lo, hi]": never ">= lo" alone.
    CHECK_MESSAGE((range.starts_with("in ") || range.starts_with("0 or in ")), range);
    CHECK(std::isfinite(spec.range.lo));
    // Counts and sizes carry their own upper bound; only the seed, which is never multiplied,
    // takes its type's (every 64-bit value).
    if (!is_unsigned_field(spec)) CHECK(std::isfinite(spec.range.hi));
  }
  CHECK(numeric_keys >= 28);  // the table was read: there are 28 today
}

TEST_CASE("preset ranges: a value past either end of any numeric key is refused, naming both") {
  for (const KeySpec& spec : preset_schema()) {
    if (!numeric(spec)) continue;
    const std::string key = spec.key;
    const std::string range = range_text(spec);
    // A list's element is blamed by its position.
    const std::string element = spec.type == Type::kIntList ? "element 1: " : "";
    for (const std::string& value : ends_of(spec).outside) {
      CAPTURE(key);
      CAPTURE(value);
      CHECK(error_of(kSynthetic, {key + "=" + value}) ==
            "--set: " + key + ": " + element + "must be " + range + ", got '" + value + "'");
    }
  }
}

TEST_CASE("preset ranges: the closed ends themselves are accepted") {
  for (const KeySpec& spec : preset_schema()) {
    if (!numeric(spec)) continue;
    for (const std::string& value : ends_of(spec).inside) {
      CAPTURE(spec.key);
      CAPTURE(value);
      // Another rule may refuse the combination (`single` with 1024 workers), never the range.
      std::string error;
      try {
        load(kSynthetic, {std::string(spec.key) + "=" + value});
      } catch (const ConfigError& e) {
        error = e.what();
      }
      CHECK_MESSAGE(error.find("must be") == std::string::npos, error);
    }
  }
}

TEST_CASE("preset ranges: the text says what is accepted, whole bounds printed whole") {
  using yaml_schema::between;
  using yaml_schema::zero_or_between;
  CHECK(range_text(between(0, 1e8)) == "in [0, 100000000]");
  CHECK(range_text(between(0.001, 1048576)) == "in [0.001, 1048576]");
  CHECK(range_text(zero_or_between(0.001, 10000)) == "0 or in [0.001, 10000]");
  CHECK(range_text(yaml_schema::at_least(1)) == ">= 1");
  CHECK(error_of(kSynthetic, {"train.seed=18446744073709551616"}) ==
        "--set: train.seed: must be in [0, 18446744073709551615], got '18446744073709551616'");
  CHECK(load(kSynthetic, {"train.seed=18446744073709551615"}).runs[0].train.seed ==
        std::numeric_limits<std::uint64_t>::max());
  // link_gbps: 0 switches the cap off; anything between 0 and 1 Mbit/s is refused.
  CHECK(load(kSynthetic, {"network.link_gbps=0"}).runs[0].network.link_gbps == 0);
  CHECK(error_of(kSynthetic, {"network.link_gbps=1e-300"}) ==
        "--set: network.link_gbps: must be 0 or in [0.001, 10000], got '1e-300'");
}

TEST_CASE("preset ranges: a tiny comm.bucket_mb is refused, the smallest still holds a float") {
  // Before the range, 1e-7 MiB passed and became a bucket of 0 bytes, which the allreduce
  // strategy's internal check refused after the results folder existed.
  CHECK(error_of("data: {kind: synthetic}\ncomm: {bucket_mb: 0.0000001}\n") ==
        "presets/x.yaml:2: comm.bucket_mb: must be in [0.001, 1048576], got '0.0000001'");
  CHECK(error_of(kSynthetic, {"comm.bucket_mb=0"}) ==
        "--set: comm.bucket_mb: must be in [0.001, 1048576], got '0'");
  const Config smallest = load(kSynthetic, {"comm.bucket_mb=0.001"}).runs[0];
  CHECK(bucket_bytes(smallest) >= sizeof(float));
  const Config largest = load(kSynthetic, {"comm.bucket_mb=1048576"}).runs[0];
  CHECK(bucket_bytes(largest) == std::size_t{1} << 40);
}

}  // namespace gradsync
