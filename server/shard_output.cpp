#include "server/shard_output.h"

#include <cstdio>

namespace gradsync {

ShardOutput::ShardOutput(const PsShardOptions& options, KeyRange range)
    : shard_(options.shard),
      range_(range),
      log_(options.log),
      name_("shard " + std::to_string(options.shard)) {}

Outgoing ShardOutput::error_to(const std::string& peer, const std::string& text) const {
  return make_error(peer, shard_, range_.begin, range_.end, text);
}

void ShardOutput::log(const std::string& line) const {
  if (log_) {
    log_(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

}  // namespace gradsync
