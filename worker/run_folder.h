// Where a run's results go: <output.dir>/<preset>-<YYYYmmdd-HHMMSS>/<run>/, with
// <output.dir>/latest pointing at the newest preset folder. `gradsync run` makes one per preset
// invocation; `gradsync worker` without --run-dir makes the same on rank 0 and hands its path to
// the other ranks through the rendezvous store (worker_process.h).
#pragma once

#include <string>

namespace gradsync {

// A new folder under `root` (created with its parents): <preset>-<timestamp>, with a suffix
// "-2", "-3"... if that exists already, so a run never writes into (or over) an earlier run's
// results. Throws Error naming the folder when it cannot be created.
std::string fresh_results_folder(const std::string& root, const std::string& preset);

// Points <root>/latest at `folder` (a child of root), replacing an older link. Best effort: a
// `latest` that is not a link is left alone, and a failure changes nothing.
void point_latest_at(const std::string& root, const std::string& folder);

}  // namespace gradsync
