// Loads the data a preset names: Fashion-MNIST (Debian's dataset-fashion-mnist), any
// MNIST-format IDX directory, or the synthetic teacher-student set.
#pragma once

#include <cstdint>

#include "common/config.h"
#include "model/dataset.h"

namespace gradsync {

// Throws gradsync::DataError naming the file for unreadable data, ConfigError for a bad kind.
TrainTest load_data(const DataConfig& data, std::uint64_t seed);

}  // namespace gradsync
