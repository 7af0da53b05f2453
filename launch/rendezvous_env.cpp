#include "launch/rendezvous_env.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdlib>

#include "common/error.h"

namespace gradsync {
namespace {

using Getenv = std::function<std::optional<std::string>(const std::string&)>;

constexpr int kMaxWorld = 1 << 20;
constexpr int kTorchrunDefaultPort = 29500;
// MASTER_PORT under Slurm without one: kJobPortBase + SLURM_JOB_ID % kJobPorts (see the header).
constexpr long long kJobPortBase = 20000;
constexpr long long kJobPorts = 10000;

std::string quoted(const std::string& text) { return "'" + text + "'"; }

// The environment, with its integers parsed and range-checked; every error names the variable
// and quotes its value.
class Env {
 public:
  explicit Env(const Getenv& getenv) : getenv_(getenv) {}

  std::optional<std::string> get(const std::string& name) const { return getenv_(name); }
  bool has(const std::string& name) const { return getenv_(name).has_value(); }

  // `why` follows a range error, to say where a bound comes from (" (WORLD_SIZE is 4)").
  static long long parse(const std::string& name, const std::string& text, long long min,
                         long long max, const std::string& why = "") {
    long long value = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    const bool out_of_range = ec == std::errc::result_out_of_range && ptr == end;
    if (!out_of_range && (ec != std::errc() || ptr != end || text.empty())) {
      throw ConfigError("environment", name, "expected an integer, got " + quoted(text));
    }
    if (out_of_range || value < min || value > max) {
      throw ConfigError("environment", name,
                        quoted(text) + " is outside [" + std::to_string(min) + ", " +
                            std::to_string(max) + "]" + why);
    }
    return value;
  }

  // The variable's integer, or nullopt when it is not set.
  std::optional<int> integer(const std::string& name, int min, int max,
                             const std::string& why = "") const {
    const auto text = get(name);
    if (!text) return std::nullopt;
    return static_cast<int>(parse(name, *text, min, max, why));
  }

  // The same, but nullopt also for a value that does not parse: for variables only consulted,
  // never adopted, so that a stray outer launcher's value cannot fail a job.
  std::optional<long long> lenient_integer(const std::string& name) const {
    const auto text = get(name);
    if (!text) return std::nullopt;
    long long value = 0;
    const char* end = text->data() + text->size();
    const auto [ptr, ec] = std::from_chars(text->data(), end, value);
    if (ec != std::errc() || ptr != end || text->empty()) return std::nullopt;
    return value;
  }

 private:
  const Getenv& getenv_;
};

// A value and the variable it came from, for error messages.
struct Field {
  int value;
  std::string name;
};

// What the chosen family says; the fields it leaves out stay empty.
struct Placement {
  std::string source = "default";
  int rank = 0;
  int world_size = 1;
  std::string world_name = "WORLD_SIZE";
  std::string local_rank_name = "LOCAL_RANK";  // the variable a missing local rank would be
  std::optional<Field> local_rank;
  std::optional<Field> local_world_size;
  std::optional<Field> node_rank;
  int restart_count = 0;
};

std::string is(const std::string& name, int value) {
  return " (" + name + " is " + std::to_string(value) + ")";
}

std::optional<Field> field(const Env& env, const std::string& name, int min, int max,
                           const std::string& why = "") {
  const auto value = env.integer(name, min, max, why);
  return value ? std::optional<Field>(Field{*value, name}) : std::nullopt;
}

// A family's rank and world size, or nullopt when its rank variable is absent. Throws when
// only one of the two is set, except a size alone when `size_alone_ok` (beside PMIX_RANK, an
// OMPI_ or PMI_ size only tells PMIx the world size).
std::optional<Placement> read_pair(const Env& env, const char* source, const char* rank_name,
                                   const char* world_name, const char* sets_both,
                                   bool size_alone_ok = false) {
  const auto rank = env.get(rank_name);
  const auto world = env.get(world_name);
  if (!rank && (!world || size_alone_ok)) return std::nullopt;
  if (!rank || !world) {
    const char* missing = rank ? world_name : rank_name;
    const char* present = rank ? rank_name : world_name;
    throw ConfigError("environment", missing,
                      std::string("missing, but ") + present + " is set to " +
                          quoted(rank ? *rank : *world) + " (" + sets_both + ")");
  }
  Placement p;
  p.source = source;
  p.world_name = world_name;
  p.world_size = static_cast<int>(Env::parse(world_name, *world, 1, kMaxWorld));
  p.rank = static_cast<int>(
      Env::parse(rank_name, *rank, 0, p.world_size - 1, is(world_name, p.world_size)));
  return p;
}

// The local fields of a family that names them.
void read_locals(const Env& env, Placement& p, const char* local_rank, const char* local_size,
                 const char* node_rank) {
  p.local_rank_name = local_rank;
  p.local_world_size = field(env, local_size, 1, p.world_size, is(p.world_name, p.world_size));
  // Checked against the ranks on this node once those are known (perhaps from Slurm).
  p.local_rank = field(env, local_rank, 0, kMaxWorld - 1);
  if (node_rank) {
    // A node holds at least one rank, so there are no more nodes than ranks.
    p.node_rank = field(env, node_rank, 0, p.world_size - 1, is(p.world_name, p.world_size));
  }
}

// The count for node `node` in Slurm's compressed tasks-per-node list: "2(x3),1" is 2 on
// nodes 0..2 and 1 on node 3. Walked, not expanded: "(x100000)" costs nothing.
int tasks_on_node(const std::string& name, const std::string& list, int node,
                  const std::string& node_name) {
  const auto malformed = [&](const std::string& item) {
    return ConfigError(
        "environment", name,
        "expected counts such as '2(x3),1', got " + quoted(list) + " (at " + quoted(item) + ")");
  };
  long long first_node = 0;  // the first node the current item covers
  std::size_t pos = 0;
  while (pos <= list.size()) {
    const std::size_t comma = std::min(list.find(',', pos), list.size());
    const std::string item = list.substr(pos, comma - pos);
    const std::size_t paren = item.find("(x");
    const std::string count_text = item.substr(0, paren);
    long long repeat = 1;
    if (paren != std::string::npos) {
      if (item.back() != ')') throw malformed(item);
      const std::string repeat_text = item.substr(paren + 2, item.size() - paren - 3);
      try {
        repeat = Env::parse(name, repeat_text, 1, INT_MAX);
      } catch (const ConfigError&) {
        throw malformed(item);
      }
    }
    int count = 0;
    try {
      count = static_cast<int>(Env::parse(name, count_text, 0, kMaxWorld));
    } catch (const ConfigError&) {
      throw malformed(item);
    }
    if (node < first_node + repeat) return count;
    first_node += repeat;
    pos = comma + 1;
  }
  throw ConfigError("environment", node_name,
                    quoted(std::to_string(node)) + " is outside [0, " +
                        std::to_string(first_node - 1) + "] (" + name + " is " + quoted(list) +
                        ")");
}

// Ranks on this node under Slurm: this node's entry of the step's tasks-per-node list (what
// srun placed here; SLURM_NODEID indexes it, relative to the step), else SLURM_NTASKS_PER_NODE
// (the --ntasks-per-node request, the same on every node).
std::optional<Field> slurm_ranks_on_node(const Env& env, const Placement& p) {
  const std::string why = is(p.world_name, p.world_size);
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    const auto list = env.get(name);
    if (!list) continue;
    const int node = env.integer("SLURM_NODEID", 0, kMaxWorld - 1).value_or(0);
    const int count = tasks_on_node(name, *list, node, "SLURM_NODEID");
    if (count < 1 || count > p.world_size) {
      throw ConfigError("environment", name,
                        quoted(*list) + " puts " + std::to_string(count) + " ranks on node " +
                            std::to_string(node) + ", outside [1, " + std::to_string(p.world_size) +
                            "]" + why);
    }
    return Field{count, name};
  }
  return field(env, "SLURM_NTASKS_PER_NODE", 1, p.world_size, why);
}

// Fills what `p` lacks from Slurm's variables. For the srun family that is everything; for an
// inner family only when Slurm's variables describe these same processes (see the header).
void fill_from_slurm(const Env& env, Placement& p) {
  if (!p.local_world_size) p.local_world_size = slurm_ranks_on_node(env, p);
  if (!p.local_rank) {
    p.local_rank_name = "SLURM_LOCALID";
    p.local_rank = field(env, "SLURM_LOCALID", 0, kMaxWorld - 1);
  }
  if (!p.node_rank) {
    p.node_rank = field(env, "SLURM_NODEID", 0, p.world_size - 1, is(p.world_name, p.world_size));
  }
}

// True when Slurm started these very processes: its task id and count are the family's rank
// and world size. Under mpirun in sbatch they are the batch step's or Open MPI's daemons' own.
bool slurm_describes(const Env& env, const Placement& p) {
  return env.lenient_integer("SLURM_PROCID") == p.rank &&
         env.lenient_integer("SLURM_NTASKS") == p.world_size;
}

// The family present, innermost launcher first.
Placement read_family(const Env& env) {
  const bool pmix = env.has("PMIX_RANK");
  if (auto p = read_pair(env, "torchrun", "RANK", "WORLD_SIZE", "torchrun sets both")) {
    read_locals(env, *p, "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK");
    // How many times torchrun's agent has restarted the workers (--max-restarts).
    p->restart_count = env.integer("TORCHELASTIC_RESTART_COUNT", 0, INT_MAX).value_or(0);
    return *p;
  }
  if (auto p = read_pair(env, "mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                         "Open MPI's mpirun sets both", pmix)) {
    // Not OMPI_COMM_WORLD_NODE_RANK: Open MPI documents it as this process's rank among the
    // processes of all jobs on this node, not as the node's index.
    read_locals(env, *p, "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", nullptr);
    return *p;
  }
  if (auto p = read_pair(env, "pmi", "PMI_RANK", "PMI_SIZE",
                         "MPICH's and Intel MPI's launchers set both", pmix)) {
    // Hydra (MPICH, Intel MPI) exports the node-local rank and count; it has no node index.
    read_locals(env, *p, "MPI_LOCALRANKID", "MPI_LOCALNRANKS", nullptr);
    return *p;
  }
  if (const auto rank = env.get("PMIX_RANK")) {
    // PMIx serves the job size through PMIx_Get, not the environment; the launchers that set
    // PMIX_RANK set one of these beside it (PRRTE the OMPI_ one, srun --mpi=pmix SLURM_NTASKS).
    for (const char* world : {"OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "PMI_SIZE"}) {
      if (!env.has(world)) continue;
      Placement p;
      p.source = "pmix";
      p.world_name = world;
      p.world_size = static_cast<int>(Env::parse(world, *env.get(world), 1, kMaxWorld));
      p.rank = static_cast<int>(
          Env::parse("PMIX_RANK", *rank, 0, p.world_size - 1, is(world, p.world_size)));
      return p;
    }
    throw ConfigError("environment", "PMIX_RANK",
                      "set to " + quoted(*rank) +
                          ", but no world size beside it (expected OMPI_COMM_WORLD_SIZE, "
                          "SLURM_NTASKS or PMI_SIZE)");
  }
  if (auto p = read_pair(env, "srun", "SLURM_PROCID", "SLURM_NTASKS",
                         "srun sets both; in an salloc or sbatch shell, start the workers with "
                         "srun")) {
    return *p;  // its local fields: fill_from_slurm(), like any family srun started
  }
  return Placement{};
}

// Rank 0's host: the first of Slurm's node lists, in the order the header explains.
std::optional<std::string> first_slurm_host(const Env& env, bool slurm_launched) {
  const char* step = "SLURM_STEP_NODELIST";
  const char* job = "SLURM_JOB_NODELIST";
  for (const char* name : {slurm_launched ? step : job, slurm_launched ? job : step}) {
    // expand_hostlist() returns at least one host or throws.
    if (const auto list = env.get(name)) return expand_hostlist(*list, name).front();
  }
  return std::nullopt;
}

}  // namespace

std::string RendezvousEnv::describe() const {
  // An IPv6 address takes brackets before its port.
  const std::string host =
      master_addr.find(':') == std::string::npos ? master_addr : "[" + master_addr + "]";
  return "rank " + std::to_string(rank) + " of " + std::to_string(world_size) + " (local " +
         std::to_string(local_rank) + " of " + std::to_string(local_world_size) + ", node " +
         std::to_string(node_rank) + ") from " + source +
         (restart_count > 0 ? ", restart " + std::to_string(restart_count) : "") + ", store at " +
         host + ":" + std::to_string(store_port);
}

RendezvousEnv read_rendezvous_env(const Getenv& getenv) {
  const Env env(getenv);
  Placement p = read_family(env);
  const bool slurm_launched =
      p.source == "srun" || (p.source != "default" && slurm_describes(env, p));
  if (slurm_launched) fill_from_slurm(env, p);

  RendezvousEnv out;
  out.source = p.source;
  out.rank = p.rank;
  out.world_size = p.world_size;
  out.restart_count = p.restart_count;
  // Without a ranks-per-node count, every rank is taken to be here (a hand-set RANK and
  // WORLD_SIZE, one machine), and then the rank is the local rank.
  out.local_world_size = p.local_world_size ? p.local_world_size->value : p.world_size;
  if (p.local_rank) {
    if (p.local_rank->value >= out.local_world_size) {
      const std::string from = p.local_world_size ? p.local_world_size->name : p.world_name;
      throw ConfigError("environment", p.local_rank->name,
                        quoted(std::to_string(p.local_rank->value)) + " is outside [0, " +
                            std::to_string(out.local_world_size - 1) + "]" +
                            is(from, out.local_world_size));
    }
    out.local_rank = p.local_rank->value;
  } else if (out.local_world_size < out.world_size) {
    throw ConfigError("environment", p.local_rank_name,
                      "missing, but " + p.local_world_size->name + " is set to " +
                          quoted(std::to_string(out.local_world_size)) +
                          " (the ranks span nodes, so the rank is not the local rank)");
  } else {
    out.local_rank = out.rank;
  }
  out.node_rank = p.node_rank ? p.node_rank->value : 0;

  if (const auto addr = env.get("MASTER_ADDR")) {
    if (addr->empty()) throw ConfigError("environment", "MASTER_ADDR", "is empty");
    out.master_addr = *addr;
  } else if (const auto host =
                 p.source == "default" ? std::nullopt : first_slurm_host(env, slurm_launched)) {
    out.master_addr = *host;
  } else if (out.local_world_size == out.world_size) {
    out.master_addr = "127.0.0.1";
  } else {
    throw ConfigError("environment", "MASTER_ADDR",
                      "not set, and no node list to take rank 0's host from (set MASTER_ADDR "
                      "to rank 0's host)");
  }

  std::string master_port_from = "torchrun's default 29500";
  if (const auto port = env.integer("MASTER_PORT", 1, 65535)) {
    out.master_port = *port;
    master_port_from = "MASTER_PORT";
  } else if (const auto job = env.get("SLURM_JOB_ID")) {
    const long long id = Env::parse("SLURM_JOB_ID", *job, 0, LLONG_MAX);
    out.master_port = static_cast<int>(kJobPortBase + id % kJobPorts);
    master_port_from = "SLURM_JOB_ID";
  } else {
    out.master_port = kTorchrunDefaultPort;
  }

  if (const auto port = env.integer("GRADSYNC_STORE_PORT", 1, 65535)) {
    out.store_port = *port;
    out.store_port_from = "GRADSYNC_STORE_PORT";
  } else if (env.has("TORCHELASTIC_RUN_ID")) {
    // torchrun's agent serves its own TCPStore on MASTER_PORT; gradsync's goes one above.
    if (out.master_port == 65535) {
      throw ConfigError("environment", "MASTER_PORT",
                        "'65535' leaves no port above it for gradsync's store (under torchrun "
                        "it listens on MASTER_PORT + 1); set GRADSYNC_STORE_PORT");
    }
    out.store_port = out.master_port + 1;
    out.store_port_from = master_port_from + " + 1 (torchrun)";
  } else {
    out.store_port = out.master_port;
    out.store_port_from = master_port_from;
  }
  return out;
}

RendezvousEnv read_rendezvous_env() {
  return read_rendezvous_env([](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    return value ? std::optional<std::string>(value) : std::nullopt;
  });
}

}  // namespace gradsync
