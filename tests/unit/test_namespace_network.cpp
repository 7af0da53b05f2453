// NamespaceNetwork's failures, with a fake `ip` first on PATH: a command that fails is named with
// what it printed, and one that hangs is killed at the timeout instead of hanging the run.
// No namespace is made. Root only: the class refuses anyone else before running a command.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/error.h"
#include "launch/namespace_network.h"
#include "tests/support/temp_dir.h"

namespace gradsync {
namespace {

using namespace std::chrono_literals;
using gradsync::testing::TempDir;

// Puts an executable `ip` running `script` first on PATH for the scope's lifetime.
class FakeIp {
 public:
  explicit FakeIp(const std::string& script)
      : old_path_(std::getenv("PATH") ? std::getenv("PATH") : "") {
    const auto ip = dir_.path() / "ip";
    std::ofstream(ip) << "#!/bin/sh\n" << script << "\n";
    std::filesystem::permissions(ip, std::filesystem::perms::owner_all);
    ::setenv("PATH", (dir_.path().string() + ":" + old_path_).c_str(), 1);
  }
  ~FakeIp() { ::setenv("PATH", old_path_.c_str(), 1); }
  FakeIp(const FakeIp&) = delete;
  FakeIp& operator=(const FakeIp&) = delete;

 private:
  TempDir dir_;
  std::string old_path_;
};

std::string construction_error(std::chrono::milliseconds timeout) {
  try {
    NamespaceNetwork net(2, 1.0, timeout);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("namespace network: a failing ip command is named with what it printed") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: not root");
    return;
  }
  FakeIp ip("echo 'RTNETLINK answers: Operation not permitted' >&2; exit 2");
  const std::string error = construction_error(10s);
  const std::string bridge = "gs" + std::to_string(::getpid()) + "br";
  CHECK(error == "network.namespaces: `ip link add " + bridge +
                     " type bridge` failed: RTNETLINK answers: Operation not permitted");
}

TEST_CASE("namespace network: a hanging ip command is killed at the timeout") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: not root");
    return;
  }
  // `exec`: the kill reaches sleep itself, which would otherwise outlive the test.
  FakeIp ip("exec sleep 60");
  const auto start = std::chrono::steady_clock::now();
  const std::string error = construction_error(300ms);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string bridge = "gs" + std::to_string(::getpid()) + "br";
  CHECK(error == "network.namespaces: `ip link add " + bridge +
                     " type bridge` did not finish within 0.3 s; killed it");
  // The first command and the teardown's bridge delete each wait 0.3 s: far below 60 s even on
  // a loaded machine.
  CHECK(took >= 0.6);
  CHECK(took < 10.0);
}

}  // namespace gradsync
