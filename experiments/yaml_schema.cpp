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
  return (r.lo_open ? v > r.lo : v >= r.lo) && (r.hi_open ? v < r.hi : v <= r.hi);
}

// Each parser returns the problem, or "" on success.

template <typename T>
std::string parse_integer(const std::string& text, T* out) {
  std::string_view digits = text;
  if (digits.size() > 1 && digits[0] == '+' && digits[1] != '-') digits.remove_prefix(1);
  const char* end = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), end, *out);
  if (ec == std::errc::result_out_of_range && ptr == end) {
    return "integer out of range [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
           std::to_string(std::numeric_limits<T>::max()) + "], got '" + text + "'";
  }
  if (ec == std::errc::invalid_argument && std::is_unsigned_v<T> && !digits.empty() &&
      digits[0] == '-') {
    std::int64_t negative;
    if (parse_integer(text, &negative).empty()) return "must be >= 0, got '" + text + "'";
  }
  if (ec != std::errc() || ptr != end) return "expected an integer, got '" + text + "'";
  return "";
}

std::string parse_number(const std::string& text, double* out) {
  std::string_view digits = text;
  if (digits.size() > 1 && digits[0] == '+' && digits[1] != '-') digits.remove_prefix(1);
  const char* end = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), end, *out);
  if (ec == std::errc::result_out_of_range && ptr == end) {
    return "number out of range, got '" + text + "'";
  }
  if (ec != std::errc() || ptr != end) return "expected a number, got '" + text + "'";
  if (!std::isfinite(*out)) return "expected a finite number, got '" + text + "'";
  return "";
}

std::string check_range(const Range& range, double value, const std::string& text) {
  if (in_range(range, value)) return "";
  return "must be " + range_text(range) + ", got '" + text + "'";
}

// One element of an integer list: from a YAML list, or a comma-separated --set value.
std::string parse_element(const YAML::Node& node, const std::string& text, const Range& range,
                          int* out) {
  if (!node.IsScalar()) return "expected an integer, got " + describe_node(node);
  std::string problem = parse_integer(text, out);
  return problem.empty() ? check_range(range, *out, text) : problem;
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

std::string range_text(const Range& r) {
  const bool has_lo = r.lo != -kInf, has_hi = r.hi != kInf;
  if (has_lo && has_hi) {
    return std::string("in ") + (r.lo_open ? "(" : "[") + format_number(r.lo) + ", " +
           format_number(r.hi) + (r.hi_open ? ")" : "]");
  }
  if (has_lo) return (r.lo_open ? "> " : ">= ") + format_number(r.lo);
  if (has_hi) return (r.hi_open ? "< " : "<= ") + format_number(r.hi);
  return "";
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
              std::string problem = parse_element(element, item, spec.range, &list.emplace_back());
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
              std::string problem = parse_element(value, item, spec.range, &list.emplace_back());
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
            problem = parse_number(text, &parsed);
          } else {
            problem = parse_integer(text, &parsed);
          }
          if (problem.empty()) problem = check_range(spec.range, static_cast<double>(parsed), text);
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
          return "[" + join(items) + "]";
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
