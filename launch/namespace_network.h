// Link emulation in the kernel (`network: {namespaces: true, link_gbps: X}`, root only): a
// multi-process run's processes live in network namespaces, each joined to the others through a
// veth pair and one bridge, and both ends of each veth are shaped with a tbf qdisc at X Gbit/s,
// so a namespace sends at most X and receives at most X, as through a real full-duplex NIC.
// Unlike the emulated link (common/link.h), this also caps what the transports do not
// count (headers, ZeroMQ's own frames, TCP's acknowledgements) and adds real queueing.
//
// A namespace is a host: the caller decides which processes share one (namespace_of_processes:
// every process its own, or the workers grouped into network.hosts simulated hosts). Processes
// of one namespace share its address and port space, and reach each other through its loopback,
// unshaped, as on one machine.
//
//   NamespaceNetwork net(namespaces, gbps);       // ip netns add, veth, bridge, tc tbf
//   spec.argv = net.wrap(ns, spec.argv);          // ip netns exec <name of ns> argv...
//   net.address(ns)                               // 10.99.0.<ns + 1>: where its processes listen
//   net.link_bytes(ns)                            // what the kernel moved over its veth so far
//   // ~NamespaceNetwork deletes every namespace (and with it its veth) and the bridge
//
// The namespaces have no route out: the run's processes see only each other. Names carry the
// launcher's pid, so concurrent runs do not collide, and the addresses live only inside the
// namespaces. Every `ip` / `tc` command is checked: a failure throws gradsync::Error with the
// command and what it printed, after undoing what was made; so does a command that has not
// finished within `command_timeout` (it is killed), so a wedged `ip` cannot hang the run.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace gradsync {

// The namespace of each process of a run, in launch order: `shards` ps shards first, each in a
// namespace of its own, then ranks 0 .. workers - 1. hosts = 0: every rank in a namespace of
// its own; hosts = H (1 <= H <= workers): the ranks grouped into H simulated hosts of
// contiguous ranks, rank r on host r * H / workers (rounded down: host sizes differ by one at
// most, and none is empty). Namespaces are numbered in order of first use: the network has the
// last one + 1.
std::vector<int> namespace_of_processes(int shards, int workers, int hosts);

// Bytes through one namespace's link, as the kernel counted them on the veth: every byte put on
// the emulated wire (Ethernet, IP and TCP headers, acknowledgements, ARP and neighbour
// discovery, and the rendezvous included), whichever process or library sent it.
struct LinkBytes {
  std::uint64_t sent = 0;      // by the namespace's processes, out through its veth
  std::uint64_t received = 0;  // into the namespace
};

// Reads the counters of the outer end of a namespace's veth from its sysfs statistics folder
// (/sys/class/net/<dev>/statistics). That end faces the bridge, so its directions are the
// namespace's reversed: what it transmits (tx_bytes) the namespace receives, and what it
// receives (rx_bytes) the namespace sent. Throws Error naming the file when one is missing or
// not a number.
LinkBytes outer_veth_bytes(const std::filesystem::path& statistics);

class NamespaceNetwork {
 public:
  // `namespaces` hosts, 1 to 249 (one /24). gbps <= 0: no tbf (separate namespaces, unshaped
  // veth). Throws ConfigError (key network.namespaces) when not root, Error when a command fails
  // or times out.
  NamespaceNetwork(int namespaces, double gbps,
                   std::chrono::milliseconds command_timeout = std::chrono::seconds(10));
  ~NamespaceNetwork();
  NamespaceNetwork(const NamespaceNetwork&) = delete;
  NamespaceNetwork& operator=(const NamespaceNetwork&) = delete;

  int size() const { return namespaces_; }
  std::string address(int ns) const;
  // "gradsync-<launcher pid>-<ns>": also the host id its processes are given (common/host_id.h).
  std::string namespace_name(int ns) const;
  std::vector<std::string> wrap(int ns, const std::vector<std::string>& argv) const;
  // The counters of ns's link since it was made (outer_veth_bytes), its own start-up chatter
  // (IPv6 neighbour discovery) included: what a run moved is the difference of a reading before
  // it and one after its processes have ended. Throws Error as outer_veth_bytes does.
  LinkBytes link_bytes(int ns) const;

 private:
  void tear_down() noexcept;
  std::string bridge_port(int ns) const;  // the outer end of the namespace's veth pair

  std::string prefix_;  // "gs<pid>"
  std::string bridge_;
  std::string ip_path_ = "ip";  // the `ip` executable wrap() names
  int namespaces_ = 0;
  std::chrono::milliseconds command_timeout_;
  int made_ = 0;  // namespaces created so far
};

}  // namespace gradsync
