#include "common/build_info.h"

#include "build_commit.h"  // generated: cmake/write_build_commit.cmake

namespace gradsync {
namespace {

std::string& stored_command_line() {
  static std::string line;
  return line;
}

}  // namespace

const char* gradsync_version() { return GRADSYNC_VERSION; }
const char* gradsync_commit() { return GRADSYNC_GIT_COMMIT; }
bool gradsync_tree_dirty() { return GRADSYNC_GIT_DIRTY; }

std::string version_line() {
  const std::string commit = gradsync_commit();
  return std::string("gradsync ") + gradsync_version() + " (commit " + commit.substr(0, 12) +
         (gradsync_tree_dirty() ? ", uncommitted changes" : "") + ")";
}

void set_command_line(int argc, const char* const* argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) line += ' ';
    line += argv[i];
  }
  stored_command_line() = line;
}

const std::string& command_line() { return stored_command_line(); }

}  // namespace gradsync
