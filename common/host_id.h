// Which host a process is on, as the ranks compare it to choose shared memory within a host and
// the network across hosts (allreduce/make_communicator.h, allreduce/shm/).
//
// "hostname/boot-id" of the kernel this process runs on (a container or network namespace of
// the same kernel shares its shared memory, so counts as the same host), unless GRADSYNC_HOST_ID
// names a simulated host: `gradsync run` with network.namespaces gives every process the id of
// the namespace it runs in (launch/namespace_network.h, network.hosts), so that processes on
// different emulated hosts never bypass the emulated link through shared memory.
#pragma once

#include <string>

namespace gradsync {

inline constexpr const char* kHostIdEnv = "GRADSYNC_HOST_ID";

// The override when kHostIdEnv is set and not empty, else "hostname/boot-id".
std::string this_host_id();

}  // namespace gradsync
