#include "worker/job_rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "allreduce/tcp/socket.h"
#include "allreduce/tcp/tcp_store.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "common/run_id.h"
#include "launch/inherited_socket.h"
#include "worker/checkpoints.h"
#include "worker/run_folder.h"

namespace gradsync {
namespace fs = std::filesystem;

namespace {

constexpr const char* kRunFolderKey = "gradsync/run_dir";
constexpr const char* kResumeKey = "gradsync/restart_from";

// Rank 0's run folder when the job is a restart: the one given, or the one the first attempt
// made (<output.dir>/latest/<run>).
std::string earlier_run_folder(const Config& config, const RunFolderRequest& request,
                               const RendezvousEnv& env) {
  if (!request.run_dir.empty()) return request.run_dir;
  const fs::path dir = fs::path(config.output.dir) / "latest" / config.name;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    const bool torchrun = env.restart_count > 0;
    throw ConfigError(torchrun ? "environment" : "command line",
                      torchrun ? "TORCHELASTIC_RESTART_COUNT" : "--resume",
                      "a restart, but no earlier run folder at " + dir.string() +
                          " to go on with (name it with --run-dir)");
  }
  return fs::canonical(dir, ec).string();
}

std::string shard_key(int shard) { return "gradsync/ps/shard/" + std::to_string(shard); }

}  // namespace

std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) {
    throw ConfigError("environment", "MASTER_ADDR", "cannot resolve '" + host + "'");
  }
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  socklen_t length = sizeof local;
  const bool ok = fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  freeaddrinfo(found);
  if (fd >= 0) close(fd);
  if (!ok) throw ConfigError("environment", "MASTER_ADDR", "no route to '" + host + "'");
  char text[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &local.sin_addr, text, sizeof text);
  return text;
}

std::unique_ptr<Store> connect_store(const RendezvousEnv& env, std::chrono::milliseconds timeout) {
  TcpStoreOptions store_options;
  store_options.host = env.master_addr;
  store_options.port = env.store_port;
  store_options.is_server = env.rank == 0;
  store_options.timeout = timeout;
  // gradsync run binds rank 0's socket itself and hands it down, or holds its port for it
  // (launch/inherited_socket.h).
  if (env.rank == 0) {
    store_options.listen_fd = inherited_listening_socket(kStoreFdEnv, env.store_port);
    if (store_options.listen_fd < 0) {
      const char* held = std::getenv(kStorePortHeldEnv);
      try {
        store_options.listen_fd =
            tcp::listen_on(env.master_addr, env.store_port, {}, held && std::string(held) == "1")
                .release();
      } catch (const Error& e) {
        throw Error("rank 0 cannot serve the rendezvous store at the port from " +
                    env.store_port_from + ": " + e.what() +
                    " (another program holds it: choose a free port)");
      }
    }
  }
  return make_tcp_store(store_options);
}

RunFolder agree_on_run_folder(Store& store, const RendezvousEnv& env, const Config& config,
                              const RunFolderRequest& request, std::chrono::milliseconds timeout) {
  RunFolder folder;
  folder.restarted = env.restart_count > 0 || request.restart;
  if (env.rank != 0) {
    folder.dir = store.get(kRunFolderKey, timeout);
    if (!request.run_dir.empty() && fs::path(request.run_dir) != fs::path(folder.dir)) {
      throw ConfigError("command line", "--run-dir",
                        "this rank was given '" + request.run_dir + "' but rank 0 writes to '" +
                            folder.dir + "'");
    }
    if (folder.restarted) folder.resume = store.get(kResumeKey, timeout);
    return folder;
  }
  if (folder.restarted) {
    folder.dir = earlier_run_folder(config, request, env);
    folder.resume = prepare_restart(config, folder.dir);
    std::cerr << "gradsync: run " << config.name << " restarts from "
              << (folder.resume.empty() ? std::string("the start") : folder.resume) << "\n";
    store.set(kResumeKey, folder.resume);  // first: a rank that sees the folder may read it
    store.set(kRunFolderKey, folder.dir);
    return folder;
  }
  folder.dir = request.run_dir;
  if (folder.dir.empty()) {
    const std::string preset_dir = fresh_results_folder(config.output.dir, request.preset_name);
    point_latest_at(config.output.dir, preset_dir);
    folder.dir = (fs::path(preset_dir) / config.name).string();
  }
  std::error_code ec;
  fs::create_directories(folder.dir, ec);
  if (ec) throw Error(folder.dir + ": cannot create run folder: " + ec.message());
  if (!request.launched_by_gradsync && !request.config_yaml.empty()) {
    write_file_atomically((fs::path(folder.dir) / "config.yaml").string(), request.config_yaml);
  }
  store.set(kRunFolderKey, folder.dir);
  return folder;
}

std::uint64_t shared_run_id(Store& store, int rank, std::chrono::milliseconds timeout) {
  const std::string key = "gradsync/run_id";
  if (rank == 0) {
    const std::uint64_t id = run_id_from_env().value_or(draw_run_id());
    store.set(key, run_id_text(id));
    return id;
  }
  return std::stoull(store.get(key, timeout), nullptr, 16);
}

void post_shard_endpoint(Store& store, int shard, const std::string& endpoint) {
  store.set(shard_key(shard), endpoint);
}

std::vector<std::string> shard_endpoints(Store& store, int shards,
                                         std::chrono::milliseconds timeout) {
  std::vector<std::string> endpoints;
  for (int k = 0; k < shards; ++k) endpoints.push_back(store.get(shard_key(k), timeout));
  return endpoints;
}

}  // namespace gradsync
