// The preset schema: one row per key of Config with its type, range, description and place.
// Parsing, --set, to_yaml and describe_keys (experiments/preset.cpp) all walk this table.
#pragma once

#include <span>

#include "experiments/yaml_schema.h"

namespace gradsync {

// Rows grouped by section, in the order to_yaml writes them.
std::span<const yaml_schema::KeySpec> preset_schema();

}  // namespace gradsync
