#include "launch/hostlist.h"

#include <cctype>
#include <cstdint>

#include "common/error.h"

namespace gradsync {
namespace {

// A node list comes from the environment: cap what it may expand to, so that a stray
// "n[0-999999999]" is an error rather than gigabytes of strings.
constexpr std::size_t kMaxHosts = std::size_t{1} << 20;
// Up to 18 digits fit a uint64_t with room to add one.
constexpr std::size_t kMaxDigits = 18;

class Expander {
 public:
  Expander(const std::string& hostlist, const std::string& variable)
      : hostlist_(hostlist), variable_(variable) {}

  std::vector<std::string> expand() {
    std::vector<std::string> hosts;
    for (const std::string& element : split_outside_brackets()) {
      if (element.empty()) fail("empty host name (a comma at an end, or two in a row)");
      for (std::string& host : expand_element(element)) {
        if (hosts.size() == kMaxHosts) fail("more than " + std::to_string(kMaxHosts) + " hosts");
        hosts.push_back(std::move(host));
      }
    }
    return hosts;
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const {
    throw ConfigError("environment", variable_, problem + " in '" + hostlist_ + "'");
  }

  // The top-level elements: commas inside brackets separate ranges, not names. Checks the
  // brackets balance (Slurm does not nest them) and that every character can be in a name.
  std::vector<std::string> split_outside_brackets() const {
    std::vector<std::string> elements(1);
    bool in_brackets = false;
    for (const char c : hostlist_) {
      if (c == '[') {
        if (in_brackets) fail("nested '['");
        in_brackets = true;
      } else if (c == ']') {
        if (!in_brackets) fail("']' without '['");
        in_brackets = false;
      } else if (c == ',' && !in_brackets) {
        elements.emplace_back();
        continue;
      } else if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_' &&
                 c != ',') {
        fail(std::string("unexpected character '") + c + "'");
      }
      elements.back() += c;
    }
    if (in_brackets) fail("unbalanced '[' (no closing ']')");
    return elements;
  }

  // One element, such as "rack[1-2]-node[01,03]": literal text and bracket groups in turn.
  // Each group multiplies the hosts so far by its numbers, so the last group varies fastest.
  std::vector<std::string> expand_element(const std::string& element) const {
    std::vector<std::string> hosts(1);
    std::size_t pos = 0;
    while (pos < element.size()) {
      const std::size_t open = element.find('[', pos);
      const std::string literal = element.substr(pos, open - pos);
      for (std::string& host : hosts) host += literal;
      if (open == std::string::npos) break;
      // split_outside_brackets() has checked that every '[' has its ']'.
      const std::size_t close = element.find(']', open);
      const std::vector<std::string> numbers =
          expand_group(element.substr(open + 1, close - open - 1));
      if (hosts.size() * numbers.size() > kMaxHosts) {
        fail("more than " + std::to_string(kMaxHosts) + " hosts");
      }
      std::vector<std::string> product;
      product.reserve(hosts.size() * numbers.size());
      for (const std::string& host : hosts) {
        for (const std::string& number : numbers) product.push_back(host + number);
      }
      hosts = std::move(product);
      pos = close + 1;
    }
    return hosts;
  }

  // The inside of one bracket group, "01-04,07": its numbers as text, padded as written.
  std::vector<std::string> expand_group(const std::string& group) const {
    std::vector<std::string> numbers;
    std::size_t pos = 0;
    while (true) {
      const std::size_t comma = group.find(',', pos);
      const std::string range = group.substr(pos, comma - pos);
      if (range.empty()) fail("empty range in '[" + group + "]'");
      const std::size_t dash = range.find('-');
      const std::string low = range.substr(0, dash);
      const std::string high = dash == std::string::npos ? low : range.substr(dash + 1);
      const std::uint64_t first = number(low, range);
      const std::uint64_t last = number(high, range);
      if (last < first) fail("descending range '" + range + "'");
      if (last - first >= kMaxHosts - numbers.size())
        fail("more than " + std::to_string(kMaxHosts) + " hosts");
      // The lower bound's digit count is the width: "01-10" gives 01..10, "8-10" gives 8..10.
      for (std::uint64_t n = first; n <= last; ++n) {
        std::string text = std::to_string(n);
        if (text.size() < low.size()) text.insert(0, low.size() - text.size(), '0');
        numbers.push_back(std::move(text));
      }
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    return numbers;
  }

  std::uint64_t number(const std::string& digits, const std::string& range) const {
    if (digits.empty()) fail("range '" + range + "' lacks a bound");
    if (digits.size() > kMaxDigits) fail("number '" + digits + "' is too long");
    std::uint64_t value = 0;
    for (const char c : digits) {
      if (!std::isdigit(static_cast<unsigned char>(c))) {
        fail("range '" + range + "' is not a number or a pair of numbers");
      }
      value = value * 10 + static_cast<std::uint64_t>(c - '0');
    }
    return value;
  }

  const std::string& hostlist_;
  const std::string& variable_;
};

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& hostlist, const std::string& variable) {
  return Expander(hostlist, variable).expand();
}

}  // namespace gradsync
