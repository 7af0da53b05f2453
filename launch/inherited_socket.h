// Listening sockets a launcher binds for its children and hands down, open across exec
// (ProcessSpec::keep_fds): the port is held from the moment it is chosen, so no other process
// can take it before the child serves on it (systemd's socket activation does the same).
//
//   launcher: spec.env {kStoreFdEnv, "5"}, spec.keep_fds {5}
//   child:    int fd = inherited_listening_socket(kStoreFdEnv, store_port);   // -1: none
#pragma once

namespace gradsync {

inline constexpr const char* kStoreFdEnv = "GRADSYNC_STORE_FD";  // rank 0's rendezvous store
inline constexpr const char* kShardFdEnv = "GRADSYNC_SHARD_FD";  // a ps shard's endpoint
// Where no descriptor can be handed down (mpirun closes them), the launcher holds rank 0's store
// port instead (tcp::hold_port) and sets this to 1: rank 0 then listens on the port it shares.
inline constexpr const char* kStorePortHeldEnv = "GRADSYNC_STORE_PORT_HELD";

// The descriptor in `variable`, checked to be a socket listening on `port` (0: any), and made
// close-on-exec again (this process's own now); -1 when the variable is unset. Throws
// ConfigError naming the variable otherwise.
int inherited_listening_socket(const char* variable, int port);

}  // namespace gradsync
