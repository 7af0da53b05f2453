// TcpStore: the Store over TCP. Rank 0 runs the server (a thread inside its process) on
// MASTER_ADDR:MASTER_PORT; every rank, 0 included, talks to it as a client.
//
// The server binds to the given address only (127.0.0.1 unless told otherwise), never to all
// interfaces by default. Clients retry connecting until `timeout` (rank 0 may start last) and
// then fail naming the address. Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "allreduce/store.h"

namespace gradsync {

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  int port = 29500;
  bool is_server = false;  // rank 0
  std::chrono::milliseconds timeout{60000};
  // The server's: a socket already listening on `port`, handed down by the launcher, served
  // instead of binding host:port (the store takes it over); -1: bind.
  int listen_fd = -1;
};

std::unique_ptr<Store> make_tcp_store(const TcpStoreOptions& options);

}  // namespace gradsync
