// Writing a results file so that a reader never sees half of it and a full disk is an error:
// the text goes to <path>.tmp, is flushed and fsync'd, and only then renamed over <path>; the
// folder is fsync'd after the rename, so the new name survives a crash too.
#pragma once

#include <string>

namespace gradsync {

// Throws gradsync::Error naming the path and the reason (strerror) on any failure; the
// temporary file is removed then, and an existing <path> is left as it was.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace gradsync
