#include "launch/rendezvous_env.h"

#include <charconv>
#include <cstdlib>

#include "common/error.h"

namespace gradsync {
namespace {

struct Family {
  const char* source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
};

// In order of precedence: a torchrun-style environment set explicitly beats the launcher's.
constexpr Family kFamilies[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

int parse_int(const std::string& name, const std::string& text, int min, int max) {
  int value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) {
    throw ConfigError("environment", name, "expected an integer, got '" + text + "'");
  }
  if (value < min || value > max) {
    throw ConfigError("environment", name,
                      std::to_string(value) + " is outside [" + std::to_string(min) + ", " +
                          std::to_string(max) + "]");
  }
  return value;
}

}  // namespace

RendezvousEnv read_rendezvous_env(
    const std::function<std::optional<std::string>(const std::string&)>& getenv) {
  RendezvousEnv env;
  env.source = "default";
  for (const Family& family : kFamilies) {
    const auto rank = getenv(family.rank);
    const auto world = getenv(family.world_size);
    if (!rank && !world) continue;
    if (!rank || !world) {
      throw ConfigError("environment", rank ? family.world_size : family.rank,
                        std::string("missing, but ") + (rank ? family.rank : family.world_size) +
                            " is set (" + family.source + " sets both)");
    }
    env.source = family.source;
    env.world_size = parse_int(family.world_size, *world, 1, 1 << 20);
    env.rank = parse_int(family.rank, *rank, 0, env.world_size - 1);
    const auto local = getenv(family.local_rank);
    env.local_rank = local ? parse_int(family.local_rank, *local, 0, 1 << 20) : env.rank;
    break;
  }
  if (const auto addr = getenv("MASTER_ADDR")) {
    if (addr->empty()) throw ConfigError("environment", "MASTER_ADDR", "is empty");
    env.master_addr = *addr;
  }
  if (const auto port = getenv("MASTER_PORT")) {
    env.master_port = parse_int("MASTER_PORT", *port, 1, 65535);
  }
  return env;
}

RendezvousEnv read_rendezvous_env() {
  return read_rendezvous_env([](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    return value ? std::optional<std::string>(value) : std::nullopt;
  });
}

}  // namespace gradsync
