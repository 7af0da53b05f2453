#include "launch/namespace_network.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/error.h"
#include "launch/child_process.h"

namespace gradsync {
namespace {

std::string command_text(const std::vector<std::string>& argv) {
  std::string command;
  for (const std::string& a : argv) command += (command.empty() ? "" : " ") + a;
  return command;
}

// Runs `argv` (no shell), returns its exit status and what it printed on stdout and stderr.
// Throws Error naming the command when it does not finish within `timeout` (it is killed then):
// `ip` and `tc` answer in milliseconds, so one that takes seconds is stuck (a wedged netlink).
int run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                std::string& output) {
  // Built before the fork (child_process.h). A PATH search: the tests put a fake `ip` first.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const ChildOutput child =
      spawn_with_output(args.data(), nullptr, "cannot run " + argv.at(0) + "\n");
  const pid_t pid = child.pid;
  const int read_end = child.output;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  std::array<char, 512> buffer;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd item{read_end, POLLIN, 0};
    const int ready = left.count() > 0 ? ::poll(&item, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      const int error = errno;
      ::close(read_end);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);  // killed before its time: nothing holds it in the kernel
      throw Error(std::string("network.namespaces: poll: ") + std::strerror(error));
    }
    if (ready == 0) {
      timed_out = true;
      break;
    }
    const ssize_t n = ::read(read_end, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of output: the command exited (or closed both streams)
    output.append(buffer.data(), static_cast<std::size_t>(n));
  }
  ::close(read_end);
  // The output's end almost always means the command is exiting; a command that closed its
  // streams and went on gets the rest of the deadline, then SIGKILL, then 1 s more: a command
  // stuck in the kernel (a wedged netlink) outlives even SIGKILL, and is left, not waited for.
  int status = 0;
  auto last_chance = std::chrono::steady_clock::time_point::max();
  while (true) {
    const pid_t reaped = ::waitpid(pid, &status, WNOHANG);
    if (reaped == pid) break;
    if (reaped < 0 && errno != EINTR) throw Error(std::string("waitpid: ") + std::strerror(errno));
    const auto now = std::chrono::steady_clock::now();
    if (!timed_out && now >= deadline) timed_out = true;
    if (timed_out && last_chance == std::chrono::steady_clock::time_point::max()) {
      ::kill(pid, SIGKILL);
      last_chance = now + std::chrono::seconds(1);
    }
    if (now >= last_chance) {
      throw Error("network.namespaces: `" + command_text(argv) + "` did not finish within " +
                  seconds_text(timeout) + " and outlived SIGKILL (stuck in the kernel?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (timed_out) {
    throw Error("network.namespaces: `" + command_text(argv) + "` did not finish within " +
                seconds_text(timeout) + "; killed it");
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void must(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  std::string output;
  if (run_command(argv, timeout, output) == 0) return;
  while (!output.empty() && (output.back() == '\n' || output.back() == '\r')) output.pop_back();
  throw Error("network.namespaces: `" + command_text(argv) + "` failed: " + output);
}

// Runs `argv`, whatever its exit status; false only when it could not run or did not finish.
bool quietly(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) noexcept {
  try {
    std::string ignored;
    run_command(argv, timeout, ignored);
    return true;
  } catch (...) {
    return false;
  }
}

// tbf on one device: `rate` bit/s, a burst of 4 ms at that rate (at least 64 KiB, so that a
// TSO segment fits), and 100 ms of queue before drops.
std::vector<std::string> tbf(const std::vector<std::string>& tc, const std::string& device,
                             double gbps) {
  const double bits = gbps * 1e9;
  const long burst = std::max(64L << 10, std::lround(bits / 8 * 0.004));
  std::vector<std::string> argv = tc;
  for (const char* a : {"qdisc", "replace", "dev"}) argv.emplace_back(a);
  argv.push_back(device);
  for (const char* a : {"root", "tbf", "rate"}) argv.emplace_back(a);
  argv.push_back(std::to_string(std::llround(bits)) + "bit");
  argv.emplace_back("burst");
  argv.push_back(std::to_string(burst));
  argv.emplace_back("latency");
  argv.emplace_back("100ms");
  return argv;
}

// One sysfs counter: a decimal number and a newline.
std::uint64_t read_counter(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw Error(path.string() + ": cannot open (is the device gone?)");
  std::uint64_t value = 0;
  if (!(in >> value)) throw Error(path.string() + ": not a byte count");
  return value;
}

}  // namespace

std::vector<int> namespace_of_processes(int shards, int workers, int hosts) {
  GRADSYNC_CHECK(shards >= 0 && workers >= 1, "namespace layout: shards >= 0, workers >= 1");
  GRADSYNC_CHECK(hosts >= 0 && hosts <= workers, "namespace layout: 0 <= hosts <= workers");
  std::vector<int> layout;
  for (int k = 0; k < shards; ++k) layout.push_back(k);
  for (int r = 0; r < workers; ++r) {
    // r * hosts / workers climbs by at most 1 from rank to rank (hosts <= workers), from 0 to
    // hosts - 1 at rank workers - 1: every host gets a block of contiguous ranks.
    const int host = hosts == 0 ? r : static_cast<int>(static_cast<long long>(r) * hosts / workers);
    layout.push_back(shards + host);
  }
  return layout;
}

LinkBytes outer_veth_bytes(const std::filesystem::path& statistics) {
  LinkBytes bytes;
  bytes.received = read_counter(statistics / "tx_bytes");  // out of the bridge, into the namespace
  bytes.sent = read_counter(statistics / "rx_bytes");
  return bytes;
}

NamespaceNetwork::NamespaceNetwork(int namespaces, double gbps,
                                   std::chrono::milliseconds command_timeout)
    : prefix_("gs" + std::to_string(::getpid())),
      bridge_(prefix_ + "br"),
      namespaces_(namespaces),
      command_timeout_(command_timeout) {
  // wrap()'s commands are exec'd by the launcher as a path, without a PATH search.
  for (const char* candidate : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (std::filesystem::exists(candidate)) {
      ip_path_ = candidate;
      break;
    }
  }
  if (::geteuid() != 0) {
    throw ConfigError("network", "network.namespaces",
                      "needs root (network namespaces, veth and tc); run as root or leave it "
                      "false and use network.link_gbps alone");
  }
  GRADSYNC_CHECK(namespaces >= 1 && namespaces < 250, "namespace network: 1..249 namespaces");
  // Every command with this network's timeout.
  const auto run = [this](const std::vector<std::string>& argv) { must(argv, command_timeout_); };
  try {
    run({"ip", "link", "add", bridge_, "type", "bridge"});
    run({"ip", "link", "set", bridge_, "up"});
    for (int i = 0; i < namespaces; ++i) {
      const std::string ns = namespace_name(i);
      const std::string inside = prefix_ + "v" + std::to_string(i);  // the namespace's NIC
      const std::string outside = bridge_port(i);
      run({"ip", "netns", "add", ns});
      ++made_;
      run({"ip", "link", "add", inside, "type", "veth", "peer", "name", outside});
      run({"ip", "link", "set", inside, "netns", ns});
      run({"ip", "link", "set", outside, "master", bridge_, "up"});
      run({"ip", "-n", ns, "addr", "add", address(i) + "/24", "dev", inside});
      run({"ip", "-n", ns, "link", "set", inside, "up"});
      run({"ip", "-n", ns, "link", "set", "lo", "up"});
      if (gbps > 0) {
        run(tbf({"tc", "-n", ns}, inside, gbps));  // what the namespace sends
        run(tbf({"tc"}, outside, gbps));           // what it receives
      }
    }
  } catch (...) {
    tear_down();
    throw;
  }
}

NamespaceNetwork::~NamespaceNetwork() { tear_down(); }

void NamespaceNetwork::tear_down() noexcept {
  // Deleting a namespace destroys the veth end inside it only once the kernel frees the
  // namespace, which can come after `ip netns del` returns; the pair's outer end lingers until
  // then. Deleting that end first removes the pair at once, so nothing is left when the run is
  // over. Ends never made are refused, quietly. A command that did not finish ends the teardown:
  // the next ones would wait for the same wedged netlink, one timeout each.
  std::vector<std::vector<std::string>> commands;
  for (int i = 0; i < made_; ++i) commands.push_back({"ip", "link", "del", bridge_port(i)});
  for (int i = 0; i < made_; ++i) commands.push_back({"ip", "netns", "del", namespace_name(i)});
  commands.push_back({"ip", "link", "del", bridge_});
  made_ = 0;
  for (const auto& command : commands) {
    if (!quietly(command, command_timeout_)) break;
  }
}

std::string NamespaceNetwork::address(int ns) const { return "10.99.0." + std::to_string(ns + 1); }

std::string NamespaceNetwork::bridge_port(int ns) const {
  return prefix_ + "p" + std::to_string(ns);
}

std::string NamespaceNetwork::namespace_name(int ns) const {
  return "gradsync-" + std::to_string(::getpid()) + "-" + std::to_string(ns);
}

std::vector<std::string> NamespaceNetwork::wrap(int ns,
                                                const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {ip_path_, "netns", "exec", namespace_name(ns)};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

LinkBytes NamespaceNetwork::link_bytes(int ns) const {
  GRADSYNC_CHECK(ns >= 0 && ns < made_, "link_bytes: a namespace of this network");
  // The outer end stays in the launcher's namespace, whose devices /sys/class/net lists.
  return outer_veth_bytes(std::filesystem::path("/sys/class/net") / bridge_port(ns) / "statistics");
}

}  // namespace gradsync
