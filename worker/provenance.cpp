#include "worker/provenance.h"

#include <unistd.h>
#include <zmq.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "allreduce/make_communicator.h"
#include "common/build_info.h"
#include "common/run_id.h"
#include "model/kernels/cpu_kernels.h"

namespace gradsync {
namespace {

std::string host_name() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? name : "unknown";
}

// /proc/cpuinfo's first "model name" (Linux on x86; elsewhere "unknown").
std::string cpu_model() {
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    const auto start = line.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? "unknown" : line.substr(start);
  }
  return "unknown";
}

nlohmann::json library_versions() {
  int major = 0, minor = 0, patch = 0;
  zmq_version(&major, &minor, &patch);
  nlohmann::json libraries = {{"zeromq", std::to_string(major) + "." + std::to_string(minor) + "." +
                                             std::to_string(patch)}};
  for (const auto& [backend, version] : backend_library_versions()) libraries[backend] = version;
  return libraries;
}

}  // namespace

nlohmann::json provenance(const std::string& run_dir) {
  nlohmann::json config_hash = nullptr;
  std::ifstream config(std::filesystem::path(run_dir) / "config.yaml");
  if (config) {
    std::stringstream text;
    text << config.rdbuf();
    config_hash = run_id_text(config_run_id(text.str()));
  }
  const CpuPath path = cpu_path();
  return {{"gradsync", gradsync_version()},
          {"commit", gradsync_commit()},
          {"uncommitted_changes", gradsync_tree_dirty()},
          {"host", host_name()},
          {"cpu", cpu_model()},
          {"cpu_kernels",
           {{"path", cpu_path_name(path)}, {"products", gemm_name()}, {"isa", cpu_path_isa(path)}}},
          {"command_line", command_line()},
          {"config_hash", config_hash},
          {"libraries", library_versions()}};
}

std::string provenance_line() {
  return version_line() + " on " + host_name() + ", " + cpu_model() + ", kernels " +
         cpu_path_name(cpu_path()) + " (" + gemm_name() + ")";
}

}  // namespace gradsync
