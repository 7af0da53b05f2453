#include "experiments/namespace_network.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "common/error.h"

namespace gradsync {
namespace {

// Runs `argv` (no shell), returns its exit status and what it printed on stdout and stderr.
int run_command(const std::vector<std::string>& argv, std::string& output) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    ::dup2(pipe_fds[1], STDERR_FILENO);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  std::array<char, 512> buffer;
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buffer.data(), buffer.size())) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) output.append(buffer.data(), static_cast<std::size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void must(const std::vector<std::string>& argv) {
  std::string output;
  if (run_command(argv, output) == 0) return;
  std::string command;
  for (const std::string& a : argv) command += (command.empty() ? "" : " ") + a;
  while (!output.empty() && (output.back() == '\n' || output.back() == '\r')) output.pop_back();
  throw Error("network.namespaces: `" + command + "` failed: " + output);
}

void quietly(const std::vector<std::string>& argv) noexcept {
  try {
    std::string ignored;
    run_command(argv, ignored);
  } catch (...) {
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

}  // namespace

NamespaceNetwork::NamespaceNetwork(int processes, double gbps)
    : prefix_("gs" + std::to_string(::getpid())), bridge_(prefix_ + "br"), processes_(processes) {
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
  GRADSYNC_CHECK(processes >= 1 && processes < 250, "namespace network: 1..249 processes");
  try {
    must({"ip", "link", "add", bridge_, "type", "bridge"});
    must({"ip", "link", "set", bridge_, "up"});
    for (int i = 0; i < processes; ++i) {
      const std::string ns = namespace_name(i);
      const std::string inside = prefix_ + "v" + std::to_string(i);   // the process's NIC
      const std::string outside = bridge_port(i);
      must({"ip", "netns", "add", ns});
      ++made_;
      must({"ip", "link", "add", inside, "type", "veth", "peer", "name", outside});
      must({"ip", "link", "set", inside, "netns", ns});
      must({"ip", "link", "set", outside, "master", bridge_, "up"});
      must({"ip", "-n", ns, "addr", "add", address(i) + "/24", "dev", inside});
      must({"ip", "-n", ns, "link", "set", inside, "up"});
      must({"ip", "-n", ns, "link", "set", "lo", "up"});
      if (gbps > 0) {
        must(tbf({"tc", "-n", ns}, inside, gbps));  // what the process sends
        must(tbf({"tc"}, outside, gbps));           // what it receives
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
  // over. (Ends never made are refused, quietly.)
  for (int i = 0; i < made_; ++i) quietly({"ip", "link", "del", bridge_port(i)});
  for (int i = 0; i < made_; ++i) quietly({"ip", "netns", "del", namespace_name(i)});
  made_ = 0;
  quietly({"ip", "link", "del", bridge_});
}

std::string NamespaceNetwork::address(int process) const {
  return "10.99.0." + std::to_string(process + 1);
}

std::string NamespaceNetwork::bridge_port(int process) const {
  return prefix_ + "p" + std::to_string(process);
}

std::string NamespaceNetwork::namespace_name(int process) const {
  return "gradsync-" + std::to_string(::getpid()) + "-" + std::to_string(process);
}

std::vector<std::string> NamespaceNetwork::wrap(int process,
                                                const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {ip_path_, "netns", "exec", namespace_name(process)};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

}  // namespace gradsync
