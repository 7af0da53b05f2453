// What the Gloo mesh needs to know about its sync pairs' sockets, which Gloo keeps to itself:
//
//   tcp::Socket socket = duplicate_connection("127.0.0.1:41000", "127.0.0.1:52144");
//   socket.shutdown();                      // wakes a thread blocked in recv on Gloo's copy
//   std::size_t bytes = largest_unread_send();   // min(net.core.wmem_max, Gloo's 32 MiB cap)
//
// A duplicate, not the number Gloo holds: Gloo may close its descriptor (a failed pair) and the
// number be reused by anything else; the duplicate keeps naming the same socket until closed.
// Internal to allreduce/gloo/.
#pragma once

#include <cstddef>
#include <string>

#include "allreduce/tcp/socket.h"

namespace gradsync::gloo {

// A close-on-exec duplicate of this process's TCP connection from `local` to `peer` (both as
// tcp::format_address writes them, "ip:port" or "[ip6]:port"): one socket at most, since a
// connection's two ends name it. Invalid when there is none.
tcp::Socket duplicate_connection(const std::string& local, const std::string& peer);

// The most bytes a blocking send hands to the kernel however little the peer reads: Gloo asks
// for a send buffer of the message's size up to 32 MiB, and the kernel grants up to
// net.core.wmem_max (/proc/sys/net/core/wmem_max; Linux's default 212992 when unreadable).
std::size_t largest_unread_send();

}  // namespace gradsync::gloo
