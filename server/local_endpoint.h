// A shard's address for the workers of its own host: ZeroMQ's ipc transport on a Linux
// abstract unix socket, beside its tcp one, so that bytes between processes of one host skip
// the kernel's TCP stack (as NCCL and Open MPI keep the network for crossing hosts). Abstract
// sockets have no file: nothing is left behind whatever ends a shard. They belong to a network
// namespace, as loopback does: a worker reaches a shard's ipc address exactly where it would
// reach its 127.0.0.1. The name comes from the shard's tcp port, which no other listener of
// this namespace holds, so a worker finds it from the tcp endpoint it was given, and a stray
// worker of another run reaches the same shard, which refuses it naming why.
//
//   options.bind_ipc = true;                                   // the shard: tcp and ipc
//   same_host_endpoint("tcp://127.0.0.1:5555");                // "ipc://@gradsync-shard-5555"
#pragma once

#include <string>

namespace gradsync {

// "ipc://@gradsync-shard-<port>".
std::string shard_ipc_endpoint(int tcp_port);

// The ipc endpoint of the shard at `tcp_endpoint` where that is on loopback (127.0.0.0/8,
// localhost, ::1); `tcp_endpoint` itself otherwise.
std::string same_host_endpoint(const std::string& tcp_endpoint);

}  // namespace gradsync
