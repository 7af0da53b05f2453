// What produced a result, written at the top of every summary.json ("provenance") and of every
// `gradsync run` log: gradsync's version and commit, the host and its CPU, the CPU kernels the
// step ran on (path, products, instruction set), the command line, the hash of the run's
// configuration, and the versions of the communication libraries this build has.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace gradsync {

// `run_dir` holds the run's config.yaml, whose text is hashed (FNV-1a, 64 bits) into
// "config_hash"; without one the field is null.
nlohmann::json provenance(const std::string& run_dir);

// One line for a log: "gradsync 0.1.0 (commit 1a2b3c4d5e6f) on host, CPU, kernels avx512
// (onednn:avx512_core_bf16)".
std::string provenance_line();

}  // namespace gradsync
