// Ports for processes a launcher starts on this host where it can neither hand a bound socket
// down (launch/inherited_socket.h) nor hold the port (tcp::hold_port): the benchmark's rank
// processes.
//
//   const int port = free_local_port();   // then pass it to the child that will listen on it
//
// The port is chosen here and bound later by another process, so it can be taken in between.
// The kernel hands out the ports of its ephemeral range (net.ipv4.ip_local_port_range) as the
// source port of every outgoing connection, and a port picked by bind(0) is one of them: on a
// busy machine some connect() takes it as its source port before the child listens ("Address
// already in use"). So the port is drawn at random outside that range, where only a listener
// asking for it by number lands, and checked free by binding it (a listener, or a connection in
// TIME_WAIT, refuses the bind).
#pragma once

#include <string>
#include <utility>

namespace gradsync {

// A TCP port on 127.0.0.1 outside the ephemeral range that was free a moment ago. Throws Error
// when none of 200 draws is.
int free_local_port();

// The kernel's ephemeral range, [first, last], from `path` (ip_local_port_range's format: two
// numbers); 32768..60999, Linux's default, when it cannot be read.
std::pair<int, int> ephemeral_port_range(
    const std::string& path = "/proc/sys/net/ipv4/ip_local_port_range");

// The ports drawn from: below the ephemeral range down to 10000 (above the well-known services),
// or above it when that leaves fewer than 1000.
std::pair<int, int> port_draw_range(std::pair<int, int> ephemeral);

}  // namespace gradsync
