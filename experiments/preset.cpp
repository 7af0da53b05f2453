// Presets: YAML files and `--set` overrides resolved into Configs (contract: preset.h).
//
// Everything about a key (type, range, description, where it lives in Config) is one row of
// the schema (experiments/preset_schema.cpp); parsing, --set, to_yaml and describe_keys all
// walk that table, so a new key is one new row. Resolution is layered: defaults <- top-level keys
// <- runs entry <- --set; combinations of keys are checked after it (experiments/preset_checks.h).
#include "experiments/preset.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>

#include "allreduce/make_communicator.h"
#include "common/error.h"
#include "experiments/preset_checks.h"
#include "experiments/preset_schema.h"
#include "experiments/yaml_schema.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;
using yaml_schema::assign;
using yaml_schema::describe_node;
using yaml_schema::format_value;
using yaml_schema::join;
using yaml_schema::KeySpec;
using yaml_schema::kSetSource;
using yaml_schema::location;
using yaml_schema::quote;
using yaml_schema::range_text;
using yaml_schema::Type;
using yaml_schema::type_name;

const std::span<const KeySpec> kSchema = preset_schema();

// ---- The key tree ----------------------------------------------------------------------------

enum class Scope { kTop, kRunEntry, kSet };

const KeySpec* find_key(const std::string& dotted) {
  for (const KeySpec& spec : kSchema) {
    if (dotted == spec.key) return &spec;
  }
  return nullptr;
}

bool is_section(const std::string& dotted) {
  for (const KeySpec& spec : kSchema) {
    if (std::string_view(spec.key).starts_with(dotted + ".")) return true;
  }
  return false;
}

// "known in train: steps, epochs, ..." for an unknown key under `prefix`.
std::string known_keys(const std::string& prefix, Scope scope) {
  std::vector<std::string> names;
  const std::string start = prefix.empty() ? "" : prefix + ".";
  for (const KeySpec& spec : kSchema) {
    std::string_view key = spec.key;
    if (!key.starts_with(start) || (spec.run_only && scope != Scope::kRunEntry) ||
        (spec.preset_wide && scope == Scope::kRunEntry)) {
      continue;
    }
    std::string child(key.substr(start.size(), key.find('.', start.size()) - start.size()));
    if (std::find(names.begin(), names.end(), child) == names.end()) names.push_back(child);
  }
  if (prefix.empty() && scope == Scope::kTop) names.push_back("runs");
  const std::string where = !prefix.empty()             ? "in " + prefix
                            : scope == Scope::kRunEntry ? "in a runs entry"
                                                        : "at top level";
  return "known " + where + ": " + join(names);
}

// One key's value as read, or a section's position (kept to place errors about its defaults).
struct Assignment {
  std::string key;
  const KeySpec* spec;  // nullptr for a section
  YAML::Node value;
  std::string source;
  std::string where;
};

struct Layer {
  std::vector<Assignment> assignments;  // in the order written
  std::string where;                    // of the runs entry itself
};

// Collects the keys of a YAML map into `layer`; `runs` receives a top-level runs list.
void collect(const YAML::Node& map, const std::string& prefix, Scope scope,
             const std::string& source, Layer* layer, std::optional<Assignment>* runs) {
  std::set<std::string> seen;
  for (const auto& entry : map) {
    const std::string where = location(source, entry.first.Mark());
    if (!entry.first.IsScalar()) {
      throw ConfigError(where, prefix.empty() ? "preset" : prefix, "keys must be plain names");
    }
    const std::string name = entry.first.Scalar();
    const std::string dotted = prefix.empty() ? name : prefix + "." + name;
    if (!seen.insert(name).second) throw ConfigError(where, dotted, "duplicate key");
    if (dotted == "runs" && scope == Scope::kTop) {
      *runs = Assignment{dotted, nullptr, entry.second, source, where};
    } else if (const KeySpec* spec = find_key(dotted)) {
      if (spec->run_only && scope != Scope::kRunEntry) {
        throw ConfigError(where, dotted, "allowed only inside a runs entry");
      }
      if (spec->preset_wide && scope == Scope::kRunEntry) {
        throw ConfigError(where, dotted,
                          "one value for the whole preset (its runs share one results folder): "
                          "set it at the top level or with --set");
      }
      layer->assignments.push_back({dotted, spec, entry.second, source, where});
    } else if (is_section(dotted)) {
      if (!entry.second.IsMap() && !entry.second.IsNull()) {
        throw ConfigError(
            where, dotted,
            "expected a map of " + dotted + " keys, got " + describe_node(entry.second));
      }
      layer->assignments.push_back({dotted, nullptr, entry.second, source, where});
      if (entry.second.IsMap()) collect(entry.second, dotted, scope, source, layer, runs);
    } else {
      throw ConfigError(where, dotted, "unknown key (" + known_keys(prefix, scope) + ")");
    }
  }
}

Layer parse_overrides(const std::vector<std::string>& overrides) {
  Layer layer;
  for (const std::string& item : overrides) {
    const std::size_t equals = item.find('=');
    if (equals == std::string::npos) {
      throw ConfigError(kSetSource, item, "expected key=value");
    }
    std::string key = item.substr(0, equals);
    key.erase(0, key.find_first_not_of(' '));
    key.erase(key.find_last_not_of(' ') + 1);
    const KeySpec* spec = find_key(key);
    if (spec == nullptr) {
      const std::size_t dot = key.rfind('.');
      const std::string parent = dot == std::string::npos ? "" : key.substr(0, dot);
      const bool section = is_section(key);
      throw ConfigError(kSetSource, key,
                        std::string(section ? "is a section, not a key" : "unknown key") + " (" +
                            known_keys(section              ? key
                                       : is_section(parent) ? parent
                                                            : "",
                                       Scope::kSet) +
                            ")");
    }
    if (spec->run_only) throw ConfigError(kSetSource, key, "allowed only inside a runs entry");
    YAML::Node value;
    try {
      value = YAML::Load(item.substr(equals + 1));
    } catch (const YAML::Exception& e) {
      throw ConfigError(kSetSource, key,
                        "cannot parse value '" + item.substr(equals + 1) + "': " + e.msg);
    }
    layer.assignments.push_back({key, spec, value, kSetSource, kSetSource});
  }
  return layer;
}

// ---- Per-run resolution ----------------------------------------------------------------------

// One run: defaults <- top level <- its runs entry <- --set, with where each key was set.
// `name_where` receives where the run is named (its name key, else the entry) for the duplicate
// check. Its combinations of keys are checked later, once --only has chosen the runs.
Config resolve(const Layer& top, const Layer& entry, const Layer& overrides, Origins* origins,
               std::string* name_where) {
  Config config;
  for (const Layer* layer : {&top, &entry, &overrides}) {
    for (const Assignment& a : layer->assignments) {
      if (a.spec != nullptr) assign(*a.spec, a.value, a.source, a.where, &config);
      (*origins)[a.key] = a.where;
    }
  }
  if (config.name.empty()) {
    config.name = config.strategy + "-" + std::to_string(config.workers);
  }
  // The name becomes a folder name, so it must stay one path component.
  const bool safe_name =
      config.name != "." && config.name != ".." &&
      std::all_of(config.name.begin(), config.name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
      });
  *name_where = origin_of(*origins, {"name"}, entry.where);
  if (!safe_name) {
    throw ConfigError(*name_where, "name",
                      "run name '" + config.name + "' may use only letters, digits, '.', '_', '-'");
  }
  return config;
}

bool named_in(const std::vector<std::string>& only, const std::string& name) {
  return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
}

ConfigError no_run_named(const std::string& path, const std::vector<std::string>& names) {
  return ConfigError(path, "--only",
                     "no run of the preset has that name (runs: " + join(names) + ")");
}

}  // namespace

std::string find_preset(const std::string& name_or_path, const std::string& presets_dir) {
  std::error_code error;
  if (fs::is_regular_file(name_or_path, error)) return name_or_path;
  const fs::path shipped = fs::path(presets_dir) / (name_or_path + ".yaml");
  if (fs::is_regular_file(shipped, error)) return shipped.string();
  std::vector<std::string> names;
  for (fs::directory_iterator it(presets_dir, error), end; !error && it != end;
       it.increment(error)) {
    if (it->path().extension() == ".yaml") names.push_back(it->path().stem().string());
  }
  std::sort(names.begin(), names.end());
  throw ConfigError(
      name_or_path, "preset",
      "no such file, and no shipped preset of that name (" +
          (names.empty() ? "none found in " + presets_dir : "shipped: " + join(names)) + ")");
}

Preset load_preset(const std::string& path, const std::vector<std::string>& overrides,
                   const std::vector<std::string>& only) {
  std::error_code error;
  if (!fs::exists(path, error)) throw ConfigError(path, "preset", "cannot open: no such file");
  if (fs::is_directory(path, error)) {
    throw ConfigError(path, "preset", "cannot open: is a directory");
  }
  std::ifstream in(path);
  if (!in) throw ConfigError(path, "preset", std::string("cannot open: ") + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  return load_preset_text(text.str(), path, overrides, PresetUse::kToRun, only);
}

PresetRun resolve_one_run(const std::string& name_or_path, const std::string& presets_dir,
                          const std::vector<std::string>& overrides,
                          const std::vector<std::string>& only) {
  Preset preset = load_preset(find_preset(name_or_path, presets_dir), overrides, only);
  if (preset.runs.size() != 1) {
    std::string names;
    for (const Config& c : preset.runs) names += (names.empty() ? "" : ", ") + c.name;
    throw ConfigError(preset.path, "--only",
                      "the preset holds " + std::to_string(preset.runs.size()) + " runs (" + names +
                          "); a worker runs one: choose it with --only");
  }
  return {std::move(preset.runs.front()), preset.name, preset.path};
}

Config load_run_config(const std::string& path) {
  Preset preset = load_preset(path, {});
  if (preset.runs.size() != 1) {
    throw ConfigError(path, "runs",
                      std::to_string(preset.runs.size()) +
                          " runs, but a worker or server takes one resolved configuration");
  }
  return std::move(preset.runs.front());
}

Preset load_preset_text(const std::string& yaml_text, const std::string& source_name,
                        const std::vector<std::string>& overrides, PresetUse use,
                        const std::vector<std::string>& only) {
  const Layer set_layer = parse_overrides(overrides);
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(location(source_name, e.mark), "preset", "invalid YAML: " + e.msg);
  }
  if (!root.IsMap() && !root.IsNull()) {  // an empty file is a preset of defaults
    throw ConfigError(location(source_name, root.Mark()), "preset",
                      "expected a map of keys, got " + describe_node(root));
  }
  Layer top;
  std::optional<Assignment> runs;
  if (root.IsMap()) collect(root, "", Scope::kTop, source_name, &top, &runs);

  std::vector<Layer> entries;
  if (!runs) {
    entries.push_back({{}, source_name + ":1"});
  } else if (!runs->value.IsSequence() || runs->value.size() == 0) {
    throw ConfigError(
        runs->where, "runs",
        "expected a non-empty list of run entries, got " + describe_node(runs->value));
  } else {
    for (std::size_t i = 0; i < runs->value.size(); ++i) {
      const YAML::Node entry = runs->value[i];
      Layer layer{{}, location(source_name, entry.Mark())};
      if (!entry.IsMap()) {
        throw ConfigError(layer.where, "runs",
                          "entry " + std::to_string(i + 1) + ": expected a map of keys, got " +
                              describe_node(entry));
      }
      collect(entry, "", Scope::kRunEntry, source_name, &layer, nullptr);
      entries.push_back(std::move(layer));
    }
  }

  Preset preset{fs::path(source_name).stem().string(), source_name, {}};
  std::vector<Origins> origins;             // per kept run
  std::vector<std::string> names;           // every run's, in order
  std::map<std::string, std::string> seen;  // run name -> where
  for (const Layer& entry : entries) {
    std::string where;
    Origins set_at;
    Config config = resolve(top, entry, set_layer, &set_at, &where);
    if (auto [it, added] = seen.emplace(config.name, where); !added) {
      throw ConfigError(where, "name",
                        "duplicate run name '" + config.name + "' (also at " + it->second + ")");
    }
    names.push_back(config.name);
    if (!named_in(only, config.name)) continue;
    preset.runs.push_back(std::move(config));
    origins.push_back(std::move(set_at));
  }
  if (preset.runs.empty()) throw no_run_named(source_name, names);
  // Only the runs --only chose: `--only gloo-ring-2 --set comm.algorithm=halving_doubling` is
  // valid though the same key would be refused for the preset's tcp runs.
  for (std::size_t i = 0; i < preset.runs.size(); ++i) {
    if (use == PresetUse::kToRun) check_data(origins[i], source_name, &preset.runs[i].data);
    check_combinations(origins[i], source_name, preset.runs[i]);
  }
  return preset;
}

std::string to_yaml(const Config& config) {
  Config copy = config;  // the schema's accessors take a mutable Config
  std::string out = "# gradsync: the resolved configuration of one run\n";
  std::string section;
  for (const KeySpec& spec : kSchema) {
    if (spec.run_only) continue;
    const std::string_view key = spec.key;
    const std::size_t dot = key.find('.');  // sections are one level deep
    const std::string parent(dot == std::string_view::npos ? "" : key.substr(0, dot));
    if (parent != section && !parent.empty()) out += parent + ":\n";
    section = parent;
    out += (parent.empty() ? std::string(key) : "  " + std::string(key.substr(dot + 1))) + ": " +
           format_value(spec.field(copy)) + "\n";
  }
  // `name` is only valid inside a runs entry; an empty one would be derived on load anyway.
  if (!config.name.empty()) out += "runs:\n  - name: " + quote(config.name) + "\n";
  return out;
}

std::string describe_keys() {
  Config defaults;
  std::vector<std::array<std::string, 4>> rows;
  for (const KeySpec& spec : kSchema) {
    std::string description = spec.description;
    if (spec.choices != nullptr) description += " (" + join(spec.choices()) + ")";
    // Which of them this build has: a backend is compiled in only where its library was found.
    if (spec.key == std::string_view("comm.backend")) {
      description += " (this build: " + join(compiled_backends()) + ")";
    }
    if (const std::string range = range_text(spec); !range.empty()) {
      description += " (" + std::string(spec.type == Type::kIntList ? "each " : "") + range + ")";
    }
    rows.push_back(
        {spec.key, type_name(spec.type), format_value(spec.field(defaults)), description});
  }
  std::size_t widths[3] = {0, 0, 0};
  for (const auto& row : rows) {
    for (int i = 0; i < 3; ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    for (int i = 0; i < 3; ++i) out += row[i] + std::string(widths[i] - row[i].size() + 2, ' ');
    out += row[3] + "\n";
  }
  return out;
}

}  // namespace gradsync
