// Sizes on the command line ("512", "4K", "64M", "1G", parse_size's syntax), checked while the
// command line is parsed: a bad one is a usage error naming its flag (one line, exit 2), not a
// failure after the command started.
//
//   app->add_option("-b,--minbytes", text)->check(byte_size());
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>

namespace gradsync {

// A size in bytes ("4MB" and "4M" alike), at least `min_bytes`.
CLI::Validator byte_size(std::size_t min_bytes = 0);
// A count of floats, 1 to `max_floats`: a trailing B is refused, not read as bytes.
CLI::Validator float_count(std::uint64_t max_floats);

}  // namespace gradsync
