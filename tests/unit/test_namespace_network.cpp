// NamespaceNetwork's failures, with a fake `ip` first on PATH: a command that fails is named with
// what it printed, and one that hangs is killed at the timeout instead of hanging the run.
// No namespace is made. Root only: the class refuses anyone else before running a command.
// Also, for anyone: which namespace each process goes in (network.hosts), and how a veth's
// counters read as the namespace's bytes.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

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

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

}  // namespace

TEST_CASE("namespace network: every shard and every rank a namespace of its own without hosts") {
  CHECK(namespace_of_processes(0, 1, 0) == std::vector<int>{0});
  CHECK(namespace_of_processes(0, 4, 0) == std::vector<int>{0, 1, 2, 3});
  CHECK(namespace_of_processes(2, 3, 0) == std::vector<int>{0, 1, 2, 3, 4});
}

TEST_CASE("namespace network: hosts group the ranks in contiguous blocks, shards apart") {
  // Rank r on host r * H / N.
  CHECK(namespace_of_processes(0, 4, 2) == std::vector<int>{0, 0, 1, 1});
  CHECK(namespace_of_processes(0, 4, 1) == std::vector<int>{0, 0, 0, 0});
  CHECK(namespace_of_processes(0, 4, 4) == std::vector<int>{0, 1, 2, 3});
  CHECK(namespace_of_processes(0, 5, 2) == std::vector<int>{0, 0, 0, 1, 1});
  CHECK(namespace_of_processes(0, 7, 5) == std::vector<int>{0, 0, 1, 2, 2, 3, 4});
  // Shards first, a namespace each; the hosts after them.
  CHECK(namespace_of_processes(2, 4, 2) == std::vector<int>{0, 1, 2, 2, 3, 3});
  // For every N and H <= N: hosts 0 .. H-1 in order, none empty, sizes within one of each other.
  for (int workers = 1; workers <= 64; ++workers) {
    for (int hosts = 1; hosts <= workers; ++hosts) {
      const std::vector<int> layout = namespace_of_processes(1, workers, hosts);
      REQUIRE(layout.size() == static_cast<std::size_t>(1 + workers));
      CHECK(layout.front() == 0);
      std::vector<int> sizes(hosts, 0);
      for (int r = 0; r < workers; ++r) {
        const int host = layout[1 + r] - 1;
        REQUIRE(host >= 0);
        REQUIRE(host < hosts);
        if (r > 0) CHECK((host == layout[r] - 1 || host == layout[r]));  // contiguous, climbing
        ++sizes[host];
      }
      const auto [least, most] = std::minmax_element(sizes.begin(), sizes.end());
      CHECK(*least >= 1);
      CHECK(*most - *least <= 1);
    }
  }
  CHECK_THROWS_AS(namespace_of_processes(0, 2, 3), Error);
}

TEST_CASE("namespace network: the outer veth's tx is what the namespace received") {
  TempDir dir;
  write_text(dir.path() / "tx_bytes", "123456789012\n");
  write_text(dir.path() / "rx_bytes", "42\n");
  const LinkBytes bytes = outer_veth_bytes(dir.path());
  CHECK(bytes.received == 123456789012ULL);
  CHECK(bytes.sent == 42);
  write_text(dir.path() / "rx_bytes", "none\n");
  CHECK_THROWS_WITH_AS(outer_veth_bytes(dir.path()),
                       ((dir.path() / "rx_bytes").string() + ": not a byte count").c_str(), Error);
  std::filesystem::remove(dir.path() / "tx_bytes");
  CHECK_THROWS_WITH_AS(
      outer_veth_bytes(dir.path()),
      ((dir.path() / "tx_bytes").string() + ": cannot open (is the device gone?)").c_str(), Error);
}

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
