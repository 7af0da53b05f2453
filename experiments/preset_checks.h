// Checks across keys, made once every layer of a run (top level, runs entry, --set) is resolved:
// a combination no single key's range can refuse, blamed on the key that set the number, at the
// place it was set. Private to the experiments library (experiments/preset.cpp calls them).
#pragma once

#include <initializer_list>
#include <map>
#include <string>

#include "common/config.h"

namespace gradsync {

// Dotted key or section -> where it was set ("file:line", or "--set").
using Origins = std::map<std::string, std::string>;

// Where the first of `keys` that was set was set; `fallback` when none was.
std::string origin_of(const Origins& origins, std::initializer_list<const char*> keys,
                      const std::string& fallback);

// data.dir against data.kind: present, a directory, and for fashion-mnist the packaged default
// filled in when none is given. Throws ConfigError naming data.dir.
void check_data(const Origins& origins, const std::string& source, DataConfig* data);

// Every other combination (backend and device, link emulation, comm.hierarchical's backends,
// single's one worker, the synthetic model's layers, network namespaces' hosts, ps' dropped
// workers). Throws the
// first as a ConfigError; `source` is the preset file, for keys left at their defaults.
void check_combinations(const Origins& origins, const std::string& source, const Config& config);

}  // namespace gradsync
