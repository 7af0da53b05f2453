// What this binary is: its version, the git commit it was built from, and the command line it
// was started with, for `gradsync --version` and the provenance of every summary and log.
#pragma once

#include <string>

namespace gradsync {

// "0.1.0" (the project's version in CMakeLists.txt).
const char* gradsync_version();
// The full commit hash the build's sources were at, "unknown" outside a git checkout.
const char* gradsync_commit();
// Whether the tree had uncommitted changes to tracked files when the binary was built.
bool gradsync_tree_dirty();
// "gradsync 0.1.0 (commit 1a2b3c4d5e6f, uncommitted changes)" or "... (commit 1a2b3c4d5e6f)".
std::string version_line();

// The process's command line, words joined by spaces; set once by main().
void set_command_line(int argc, const char* const* argv);
const std::string& command_line();

}  // namespace gradsync
