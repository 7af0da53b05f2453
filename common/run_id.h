// A run's identity: the 64-bit id its processes present to each other where a stranger could
// reach them, so that a process of another run (a worker started with the wrong endpoints, a
// shard left over from an earlier run) is refused instead of joining. TcpRing draws its own
// token through the store; the parameter server's HELLO and heartbeats carry this id.
//
// Where it comes from, first match wins:
//   - GRADSYNC_RUN_ID (16 hex digits): `gradsync run` draws one per run and gives it to every
//     process it starts, mpirun's included; a user starting shards and workers by hand may set it;
//   - under ps roles (every process a rank of one launch), rank 0 draws it and shares it
//     through the rendezvous store (worker/worker_process.cpp);
//   - otherwise the hash of the run's resolved configuration (its YAML, as every process of the
//     run resolves it from the same file): processes started by hand from one config.yaml are
//     one run.
//
//   const std::uint64_t id = run_id_for(to_yaml(config));
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace gradsync {

inline constexpr const char* kRunIdEnv = "GRADSYNC_RUN_ID";

// A fresh id, never 0 (0 means "none" in messages of older peers).
std::uint64_t draw_run_id();

// "00c0ffee12345678": how the id travels in kRunIdEnv and appears in messages.
std::string run_id_text(std::uint64_t id);

// The id in kRunIdEnv; nothing when unset. Throws ConfigError naming the variable when it is
// not 1 to 16 hex digits, or is 0.
std::optional<std::uint64_t> run_id_from_env();

// The id of a run whose processes share nothing but their configuration: a hash (FNV-1a, 64
// bits) of its text, never 0.
std::uint64_t config_run_id(const std::string& config_text);

// kRunIdEnv's id, else config_run_id(config_yaml). Throws ConfigError naming the variable.
std::uint64_t run_id_for(const std::string& config_yaml);

}  // namespace gradsync
