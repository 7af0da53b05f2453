// The TcpStore server: one thread inside rank 0's process that holds the key-value map and
// answers the clients (protocol: allreduce/tcp/store_protocol.h).
//
// It listens on the given host only, never on all interfaces by default. A GET or WAIT for a
// missing key is parked on the server and answered when a SET brings the key, so waiting
// clients do not poll. Connections that send garbage are dropped; nothing a client sends can
// stop the server. The destructor wakes the thread, closes every connection and joins.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "allreduce/tcp/socket.h"

namespace gradsync::tcp {

class TcpStoreServer {
 public:
  // Binds host:port at once (throws gradsync::Error naming the address if it cannot).
  TcpStoreServer(const std::string& host, int port);
  // Serves on a socket already listening (bound by a launcher and handed down): no window in
  // which another process could take the port.
  explicit TcpStoreServer(Socket listener);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }

 private:
  struct Client {
    Socket socket;
    std::string in;   // bytes received and not yet parsed
    std::string out;  // reply bytes not yet sent
    bool greeted = false;
    // The parked request: its type and keys, answered when they all exist.
    bool parked = false;
    std::uint8_t parked_type = 0;
    std::vector<std::string> parked_keys;
  };

  void serve();
  void accept_clients();
  // Reads what the client sent and handles every complete request; false drops the client.
  bool read_from(Client& client);
  bool handle_requests(Client& client);
  bool answer_if_ready(Client& client);
  bool flush(Client& client);
  bool present(const std::vector<std::string>& keys) const;

  Socket listener_;
  int port_ = 0;
  int wake_read_ = -1;
  int wake_write_ = -1;
  std::map<std::string, std::string> values_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::thread thread_;
};

}  // namespace gradsync::tcp
