#include "worker/checkpoint_settings.h"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "common/checkpoint_file.h"

namespace gradsync {
namespace fs = std::filesystem;

namespace {

// The shortest text that reads back as the same double: 0.05 stays "0.05", and two learning
// rates that differ anywhere differ in the file.
std::string exact(double value) {
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof text, value);
  return error == std::errc() ? std::string(text, end) : std::to_string(value);
}

}  // namespace

std::string training_settings(const Config& config) {
  std::ostringstream out;
  out << "strategy " << config.strategy << "\n"
      << "workers " << config.workers << "\n"
      << "data.kind " << config.data.kind << "\n"
      << "train.batch " << config.train.batch << "\n"
      << "train.accumulation_steps " << config.train.accumulation_steps << "\n"
      << "train.lr " << exact(config.train.lr) << "\n"
      << "train.momentum " << exact(config.train.momentum) << "\n"
      << "train.weight_decay " << exact(config.train.weight_decay) << "\n"
      << "train.seed " << config.train.seed << "\n";
  // Listed only when set, so a checkpoint of a constant-rate run reads the same as before.
  if (config.train.lr_schedule != "constant" || config.train.warmup_steps > 0) {
    out << "train.lr_schedule " << config.train.lr_schedule << "\n"
        << "train.warmup_steps " << config.train.warmup_steps << "\n";
  }
  // Cosine anneals to 0 at the run's last step: another length is another schedule.
  if (config.train.lr_schedule == "cosine") {
    out << "train.steps " << config.train.steps << "\n"
        << "train.epochs " << config.train.epochs << "\n";
  }
  if (config.strategy == "ps") {
    out << "ps.servers " << config.ps.servers << "\n"
        << "ps.mode " << config.ps.mode << "\n";
  }
  // Batch norm's statistics over the global batch or each rank's: another trajectory.
  if (config.model.kind == "resnet") {
    out << "model.sync_batchnorm " << (config.model.sync_batchnorm ? "true" : "false") << "\n";
  }
  return out.str();
}

std::vector<std::string> changed_settings(const std::string& step_folder, const Config& config) {
  std::ifstream file(fs::path(step_folder) / kCheckpointSettingsFile);
  if (!file) return {};
  // "key value" lines, in order; a line without a space is not ours and is skipped: the note
  // is a courtesy, not a check.
  auto read = [](std::istream& in) {
    std::vector<std::pair<std::string, std::string>> settings;
    for (std::string line; std::getline(in, line);) {
      const auto space = line.find(' ');
      if (space == std::string::npos) continue;
      settings.emplace_back(line.substr(0, space), line.substr(space + 1));
    }
    return settings;
  };
  std::istringstream current(training_settings(config));
  const auto now_list = read(current);
  const std::map<std::string, std::string> now(now_list.begin(), now_list.end());
  std::vector<std::string> changed;
  std::map<std::string, std::string> before;
  for (const auto& [key, then] : read(file)) {
    before.emplace(key, then);
    const auto it = now.find(key);
    const std::string value = it == now.end() ? "(not used)" : it->second;
    if (value != then) changed.push_back(key + " " + then + " -> " + value);
  }
  // Settings listed only when set (a learning-rate schedule) that the checkpoint's run lacked.
  for (const auto& [key, value] : now_list) {
    if (!before.contains(key)) changed.push_back(key + " (not used) -> " + value);
  }
  return changed;
}

void note_changed_settings(const Config& config, const std::string& step_folder) {
  const std::vector<std::string> changed = changed_settings(step_folder, config);
  if (changed.empty()) return;
  std::string line =
      "gradsync: run " + config.name + " resumes " + step_folder + " with other settings: ";
  for (std::size_t i = 0; i < changed.size(); ++i) line += (i ? ", " : "") + changed[i];
  std::cerr << line << " (it goes on with the new ones)\n";
}

}  // namespace gradsync
