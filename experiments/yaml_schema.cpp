// Converting between YAML nodes and Config fields for the keys of experiments/preset_schema.cpp.
#include "experiments/yaml_schema.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string_view>
#include <type_traits>

#include "common/error.h"

namespace gradsync::yaml_schema {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string format_number(double value) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);  // shortest round trip
  return std::string(buffer, result.ptr);
}

bool in_range(const Range& r, double v) {
  if (r.or_zero && v == 0) return true;
  return (r.lo_open ? v > r.lo : v >= r.lo) && (r.hi_open ? v < r.hi : v <= r.hi);
}

// A bound as a user would type it: whole numbers whole ("100000000", where to_chars' shortest
// form is "1e+08"), others in their shortest round-trip form.
std::string format_bound(double value) {
  if (std::trunc(value) == value && std::fabs(value) < 9007199254740992.0) {  // exact below 2^53
    return std::to_string(static_cast<long long>(value));
  }
  return format_number(value);
}

// The two ends of a range as text; an empty one is unbounded.
struct Bounds {
  std::string lo, hi;
  bool lo_open = false, hi_open = false, or_zero = false;
};

Bounds declared_bounds(const Range& r) {
  return {r.lo == -kInf ? "" : format_bound(r.lo), r.hi == kInf ? "" : format_bound(r.hi),
          r.lo_open, r.hi_open, r.or_zero};
}

// An integer key's declared range within its type: a side the schema leaves open (or sets past
// the type) is the type's own limit, printed from the integer itself since a double cannot hold
// 2^64 - 1.
template <typename T>
Bounds integer_bounds(const Range& r) {
  Bounds b = declared_bounds(r);
  if (r.lo <= static_cast<double>(std::numeric_limits<T>::min())) {
    b.lo = std::to_string(std::numeric_limits<T>::min());
    b.lo_open = false;
  }
  if (r.hi >= static_cast<double>(std::numeric_limits<T>::max())) {
    b.hi = std::to_string(std::numeric_limits<T>::max());
    b.hi_open = false;
  }
  return b;
}

std::string bounds_text(const Bounds& b) {
  std::string interval;
  if (!b.lo.empty() && !b.hi.empty()) {
    interval =
        std::string("in ") + (b.lo_open ? "(" : "[") + b.lo + ", " + b.hi + (b.hi_open ? ")" : "]");
  } else if (!b.lo.empty()) {
    interval = (b.lo_open ? "> " : ">= ") + b.lo;
  } else if (!b.hi.empty()) {
    interval = (b.hi_open ? "< " : "<= ") + b.hi;
  } else {
    return "";
  }
  return b.or_zero ? "0 or " + interval : interval;
}

std::string out_of_range(const KeySpec& spec, const std::string& text) {
  return "must be " + range_text(spec) + ", got '" + text + "'";
}

// Each parser returns the problem, or "" on success.

enum class Parsed { kOk, kNotInteger, kOutsideType };

// An integer beyond T (99999999999 for an int, -1 for an unsigned) is kOutsideType: its error
// is the key's range, like any other value outside it.
template <typename T>
Parsed parse_integer(const std::string& text, T* out) {
  std::string_view digits = text;
  if (digits.size() > 1 && digits[0] == '+' && digits[1] != '-') digits.remove_prefix(1);
  const char* end = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), end, *out);
  if (ec == std::errc::result_out_of_range && ptr == end) return Parsed::kOutsideType;
  if (ec == std::errc::invalid_argument && std::is_unsigned_v<T> && !digits.empty() &&
      digits[0] == '-') {
    std::int64_t negative;
    if (parse_integer(text, &negative) != Parsed::kNotInteger) return Parsed::kOutsideType;
  }
  if (ec != std::errc() || ptr != end) return Parsed::kNotInteger;
  return Parsed::kOk;
}

// A value past what a double holds (1e999) is a number outside the key's range.
std::string parse_number(const KeySpec& spec, const std::string& text, double* out) {
  std::string_view digits = text;
  if (digits.size() > 1 && digits[0] == '+' && digits[1] != '-') digits.remove_prefix(1);
  const char* end = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), end, *out);
  if (ec == std::errc::result_out_of_range && ptr == end) return out_of_range(spec, text);
  if (ec != std::errc() || ptr != end) return "expected a number, got '" + text + "'";
  if (!std::isfinite(*out)) return "expected a finite number, got '" + text + "'";
  return "";
}

// An integer (one element of a list too): its type, then its range.
template <typename T>
std::string parse_checked_integer(const KeySpec& spec, const std::string& text, T* out) {
  switch (parse_integer(text, out)) {
    case Parsed::kNotInteger:
      return "expected an integer, got '" + text + "'";
    case Parsed::kOutsideType:
      return out_of_range(spec, text);
    case Parsed::kOk:
      break;
  }
  return in_range(spec.range, static_cast<double>(*out)) ? "" : out_of_range(spec, text);
}

// One element of an integer list: from a YAML list, or a comma-separated --set value.
std::string parse_element(const KeySpec& spec, const YAML::Node& node, const std::string& text,
                          int* out) {
  if (!node.IsScalar()) return "expected an integer, got " + describe_node(node);
  return parse_checked_integer(spec, text, out);
}

}  // namespace

const char* type_name(Type type) {
  switch (type) {
    case Type::kInteger:
      return "integer";
    case Type::kNumber:
      return "number";
    case Type::kString:
      return "string";
    case Type::kBool:
      return "bool";
    case Type::kIntList:
      return "list of integers";
    case Type::kChoice:
      return "choice";
  }
  return "?";
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::string quote(const std::string& s) {
  bool plain = !s.empty() && s != "null" && s != "Null" && s != "NULL" &&
               (std::isalnum(static_cast<unsigned char>(s[0])) || s[0] == '/' || s[0] == '_');
  for (char c : s)
    plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '_' ||
                      c == '.' || c == '-');
  if (plain) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(c));
      out += hex;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string describe_node(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return "nothing";
}

std::string range_text(const Range& r) { return bounds_text(declared_bounds(r)); }

std::string range_text(const KeySpec& spec) {
  Config scratch;  // the accessors need a Config; only the field's type matters here
  return std::visit(
      [&](auto* field) -> std::string {
        using T = std::remove_pointer_t<decltype(field)>;
        if constexpr (std::is_same_v<T, std::vector<int>>) {
          return bounds_text(integer_bounds<int>(spec.range));
        } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          return bounds_text(integer_bounds<T>(spec.range));
        } else if constexpr (std::is_same_v<T, double>) {
          return range_text(spec.range);
        } else {
          return "";
        }
      },
      spec.field(scratch));
}

std::string location(const std::string& source, const YAML::Mark& mark) {
  if (source == kSetSource || mark.is_null()) return source;
  return source + ":" + std::to_string(mark.line + 1);
}

void assign(const KeySpec& spec, const YAML::Node& value, const std::string& source,
            const std::string& where, Config* config) {
  auto fail = [&](const std::string& at, const std::string& problem) {
    throw ConfigError(at, spec.key, problem);
  };
  const std::string text = value.IsScalar() ? value.Scalar() : "";
  std::visit(
      [&](auto* target) {
        using T = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<T, std::vector<int>>) {
          GRADSYNC_CHECK(spec.type == Type::kIntList, spec.key);
          std::vector<int> list;
          if (value.IsSequence()) {  // from YAML: [256, 256] or a block list
            for (std::size_t i = 0; i < value.size(); ++i) {
              const YAML::Node element = value[i];
              std::string item = element.IsScalar() ? element.Scalar() : "";
              std::string problem = parse_element(spec, element, item, &list.emplace_back());
              if (!problem.empty()) {
                fail(location(source, element.Mark()),
                     "element " + std::to_string(i + 1) + ": " + problem);
              }
            }
          } else if (value.IsScalar()) {  // from --set: 256,256
            std::stringstream items(text);
            std::string item;
            for (int i = 1; std::getline(items, item, ','); ++i) {
              item.erase(0, item.find_first_not_of(" \t"));
              item.erase(item.find_last_not_of(" \t") + 1);
              std::string problem = parse_element(spec, value, item, &list.emplace_back());
              if (!problem.empty()) fail(where, "element " + std::to_string(i) + ": " + problem);
            }
          } else {
            fail(where, "expected a list of integers, got " + describe_node(value));
          }
          *target = std::move(list);
        } else if constexpr (std::is_same_v<T, std::string>) {
          GRADSYNC_CHECK(spec.type == Type::kString || spec.type == Type::kChoice, spec.key);
          if (spec.type == Type::kChoice) {
            const std::vector<std::string>& valid = spec.choices();
            if (!value.IsScalar()) {
              fail(where, "expected one of " + join(valid) + ", got " + describe_node(value));
            }
            if (std::find(valid.begin(), valid.end(), text) == valid.end()) {
              fail(where, "unknown " + std::string(spec.key) + " '" + text +
                              "' (valid: " + join(valid) + ")");
            }
          } else if (!value.IsScalar() && !value.IsNull()) {  // `dir:` with nothing means ""
            fail(where, "expected a string, got " + describe_node(value));
          }
          *target = text;
        } else if constexpr (std::is_same_v<T, bool>) {
          GRADSYNC_CHECK(spec.type == Type::kBool, spec.key);
          if (text != "true" && text != "false") {
            fail(where, "expected true or false, got " + describe_node(value));
          }
          *target = text == "true";
        } else {
          const bool is_number = std::is_same_v<T, double>;
          GRADSYNC_CHECK(spec.type == (is_number ? Type::kNumber : Type::kInteger), spec.key);
          if (!value.IsScalar()) {
            fail(where, std::string(is_number ? "expected a number" : "expected an integer") +
                            ", got " + describe_node(value));
          }
          T parsed{};
          std::string problem;
          if constexpr (is_number) {
            problem = parse_number(spec, text, &parsed);
            if (problem.empty() && !in_range(spec.range, parsed)) {
              problem = out_of_range(spec, text);
            }
          } else {
            problem = parse_checked_integer(spec, text, &parsed);
          }
          if (!problem.empty()) fail(where, problem);
          *target = parsed;
        }
      },
      spec.field(*config));
}

std::string format_value(const Field& field) {
  return std::visit(
      [](auto* value) -> std::string {
        using T = std::remove_pointer_t<decltype(value)>;
        if constexpr (std::is_same_v<T, std::vector<int>>) {
          std::vector<std::string> items;
          for (int v : *value) items.push_back(std::to_string(v));
          std::string list = "[";
          list += join(items);
          return list + "]";
        } else if constexpr (std::is_same_v<T, std::string>) {
          return quote(*value);
        } else if constexpr (std::is_same_v<T, bool>) {
          return *value ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          return format_number(*value);
        } else {
          return std::to_string(*value);
        }
      },
      field);
}

}  // namespace gradsync::yaml_schema
