// What the Gloo mesh needs to know about its sync pairs' sockets, which Gloo keeps to itself:
//
//   const int socket = duplicate_socket_bound_to(local_address);   // -1 if none; close() it
//   shutdown(socket, SHUT_RDWR);            // wakes a thread blocked in recv on Gloo's copy
//   std::size_t bytes = kernel_send_buffer_limit();                // net.core.wmem_max
//
// A duplicate, not the number Gloo holds: Gloo may close its descriptor (a failed pair) and the
// number be reused by anything else; the duplicate keeps naming the same socket until closed.
// Internal to allreduce/gloo/.
#pragma once

#include <sys/socket.h>

#include <cstddef>

namespace gradsync::gloo {

// A close-on-exec duplicate of the connected socket of this process whose local address is
// `local` (IPv4 or IPv6, address and port), or -1 when there is none.
int duplicate_socket_bound_to(const sockaddr_storage& local);

// net.core.wmem_max (/proc/sys/net/core/wmem_max): the largest send buffer an unprivileged
// setsockopt(SO_SNDBUF) gets, and so the most a blocking send hands to the kernel however little
// the peer reads. Linux's default, 212992, when the file cannot be read.
std::size_t kernel_send_buffer_limit();

}  // namespace gradsync::gloo
