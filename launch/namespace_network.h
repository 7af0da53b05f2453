// Link emulation in the kernel (`network: {namespaces: true, link_gbps: X}`, root only): every
// process of a multi-process run gets its own network namespace, joined to the others through a
// veth pair and one bridge, and both ends of its veth are shaped with a tbf qdisc at X Gbit/s,
// so the process sends at most X and receives at most X, as through a real full-duplex NIC.
// Unlike the emulated link (common/link.h), this also caps what the transports do not
// count (headers, ZeroMQ's own frames, TCP's acknowledgements) and adds real queueing.
//
//   NamespaceNetwork net(processes, gbps);        // ip netns add, veth, bridge, tc tbf
//   spec.argv = net.wrap(i, spec.argv);           // ip netns exec <ns> argv...
//   net.address(i)                                // 10.99.0.<i + 1>: where process i listens
//   // ~NamespaceNetwork deletes every namespace (and with it its veth) and the bridge
//
// The namespaces have no route out: the run's processes see only each other. Names carry the
// launcher's pid, so concurrent runs do not collide, and the addresses live only inside the
// namespaces. Every `ip` / `tc` command is checked: a failure throws gradsync::Error with the
// command and what it printed, after undoing what was made; so does a command that has not
// finished within `command_timeout` (it is killed), so a wedged `ip` cannot hang the run.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace gradsync {

class NamespaceNetwork {
 public:
  // gbps <= 0: no tbf (separate namespaces, unshaped veth). Throws ConfigError (key
  // network.namespaces) when not root, Error when a command fails or times out.
  NamespaceNetwork(int processes, double gbps,
                   std::chrono::milliseconds command_timeout = std::chrono::seconds(10));
  ~NamespaceNetwork();
  NamespaceNetwork(const NamespaceNetwork&) = delete;
  NamespaceNetwork& operator=(const NamespaceNetwork&) = delete;

  std::string address(int process) const;
  std::string namespace_name(int process) const;
  std::vector<std::string> wrap(int process, const std::vector<std::string>& argv) const;

 private:
  void tear_down() noexcept;
  std::string bridge_port(int process) const;  // the outer end of the process's veth pair

  std::string prefix_;  // "gs<pid>"
  std::string bridge_;
  std::string ip_path_ = "ip";  // the `ip` executable wrap() names
  int processes_ = 0;
  std::chrono::milliseconds command_timeout_;
  int made_ = 0;  // namespaces created so far
};

}  // namespace gradsync
