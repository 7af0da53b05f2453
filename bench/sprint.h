// printf-style formatting into a std::string, for the benchmarks' tables and JSON lines: the
// string is as long as the text, never cut at a fixed buffer's end.
#pragma once

#include <cstdio>
#include <string>

namespace gradsync {

template <typename... Args>
std::string sprint(const char* fmt, Args... args) {
  const int length = std::snprintf(nullptr, 0, fmt, args...);
  if (length <= 0) return {};
  std::string text(static_cast<std::size_t>(length) + 1, '\0');
  std::snprintf(text.data(), text.size(), fmt, args...);
  text.pop_back();  // the terminating NUL snprintf wrote
  return text;
}

}  // namespace gradsync
