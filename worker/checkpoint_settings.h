// The settings a checkpoint was trained under, kept beside its parts, and the note a resumed run
// prints when its own differ (worker/checkpoints.h writes and resumes the checkpoints).
#pragma once

#include <string>
#include <vector>

#include "common/config.h"

namespace gradsync {

// What shapes a run's trajectory besides the model, as "key value" lines (strategy, workers,
// data kind, batch, lr, momentum, weight decay, seed, accumulation; ps servers and mode).
// Written beside a checkpoint's parts (kCheckpointSettingsFile), so that a resumed run can say
// what it changed. A checkpoint resumes under other settings (another strategy, worker count or lr
// is a use, not a mistake); the note only makes sure it is not a surprise.
std::string training_settings(const Config& config);

// The settings that differ between the checkpoint in `step_folder` and `config`, each as
// "train.lr 0.1 -> 0.05", in the file's order; empty when none differ or the folder has no
// settings file (checkpoints written before it existed).
std::vector<std::string> changed_settings(const std::string& step_folder, const Config& config);

// When the checkpoint in `step_folder` was trained under settings other than config's, says so
// on stderr in one line:
// "gradsync: run dp-2 resumes .../step-00000050 with other settings: train.lr 0.1 -> 0.05
// (it goes on with the new ones)".
void note_changed_settings(const Config& config, const std::string& step_folder);

}  // namespace gradsync
