#include "allreduce/tcp/tcp_store_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "allreduce/tcp/store_protocol.h"
#include "common/error.h"

namespace gradsync::tcp {

TcpStoreServer::TcpStoreServer(const std::string& host, int port)
    : TcpStoreServer(listen_on(host, port)) {}

TcpStoreServer::TcpStoreServer(Socket listener)
    : listener_(std::move(listener)), port_(local_port(listener_)) {
  set_nonblocking(listener_.fd());
  // A self-pipe wakes the server's poll() when the destructor wants it to stop.
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw Error(std::string("store server: pipe failed: ") + std::strerror(errno));
  }
  wake_read_ = fds[0];
  wake_write_ = fds[1];
  thread_ = std::thread([this] { serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_write_, &byte, 1);
  thread_.join();
  ::close(wake_read_);
  ::close(wake_write_);
}

void TcpStoreServer::serve() {
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({wake_read_, POLLIN, 0});
    fds.push_back({listener_.fd(), POLLIN, 0});
    for (const auto& c : clients_) {
      const short events = POLLIN | (c->out.empty() ? 0 : POLLOUT);
      fds.push_back({c->socket.fd(), events, 0});
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) continue;  // EINTR
    if (fds[0].revents != 0) return;
    // Clients first: accept_clients() appends to clients_, which fds does not describe yet.
    std::vector<bool> keep(clients_.size(), true);
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      const short revents = fds[i + 2].revents;
      if (revents & (POLLIN | POLLHUP | POLLERR)) keep[i] = read_from(*clients_[i]);
      if (keep[i] && (revents & POLLOUT)) keep[i] = flush(*clients_[i]);
    }
    // A SET may have released requests that other clients had parked, or that a client sent
    // behind its parked one; run them now that the keys exist.
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      if (keep[i]) keep[i] = answer_if_ready(*clients_[i]) && handle_requests(*clients_[i]);
    }
    std::vector<std::unique_ptr<Client>> live;
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      if (keep[i]) live.push_back(std::move(clients_[i]));
    }
    clients_ = std::move(live);
    if (fds[1].revents != 0) accept_clients();
  }
}

void TcpStoreServer::accept_clients() {
  while (true) {
    const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN: no more pending; other errors: the client gave up
    auto client = std::make_unique<Client>();
    client->socket = Socket(fd);
    tune_socket(fd);
    clients_.push_back(std::move(client));
  }
}

bool TcpStoreServer::read_from(Client& client) {
  char buffer[64 * 1024];
  while (true) {
    const ssize_t n = ::recv(client.socket.fd(), buffer, sizeof(buffer), 0);
    if (n > 0) {
      client.in.append(buffer, static_cast<std::size_t>(n));
      // One request is at most a maximal key and value; more unparsed bytes than that is abuse.
      if (client.in.size() > std::size_t(kMaxValueBytes) + 2 * kMaxKeyBytes) return false;
      continue;
    }
    if (n == 0) return false;  // the client closed (or gave up on a parked request)
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return false;
  }
  return handle_requests(client);
}

bool TcpStoreServer::handle_requests(Client& client) {
  if (!client.greeted) {
    if (client.in.size() < 8) return true;
    if (read_u32(client.in.data()) != kStoreMagic ||
        read_u32(client.in.data() + 4) != kStoreVersion) {
      return false;  // not a gradsync store client
    }
    client.in.erase(0, 8);
    client.greeted = true;
  }
  // Requests are handled in order; one parked request holds back the ones behind it.
  while (!client.parked && !client.in.empty()) {
    StoreReader reader(client.in);
    bool ok = true;
    const auto type = reader.u8();
    std::vector<std::string> keys;
    std::optional<std::string> value;
    if (*type == std::uint8_t(StoreRequest::kSet) || *type == std::uint8_t(StoreRequest::kGet)) {
      auto key = reader.string(kMaxKeyBytes, ok);
      if (!ok) return false;
      if (!key) return true;  // incomplete: wait for more bytes
      keys.push_back(std::move(*key));
      if (*type == std::uint8_t(StoreRequest::kSet)) {
        value = reader.string(kMaxValueBytes, ok);
        if (!ok) return false;
        if (!value) return true;
      }
    } else if (*type == std::uint8_t(StoreRequest::kWait) ||
               *type == std::uint8_t(StoreRequest::kCheck)) {
      const auto n = reader.u32();
      if (!n) return true;
      if (*n > kMaxKeys) return false;
      for (std::uint32_t i = 0; i < *n; ++i) {
        auto key = reader.string(kMaxKeyBytes, ok);
        if (!ok) return false;
        if (!key) return true;
        keys.push_back(std::move(*key));
      }
    } else {
      return false;  // unknown request type
    }
    client.in.erase(0, reader.consumed());

    if (*type == std::uint8_t(StoreRequest::kSet)) {
      values_[keys[0]] = std::move(*value);
      client.out.push_back(0);
    } else if (*type == std::uint8_t(StoreRequest::kCheck)) {
      put_u32(client.out, static_cast<std::uint32_t>(keys.size()));
      for (const auto& key : keys) client.out.push_back(values_.count(key) ? 1 : 0);
    } else {
      // GET / WAIT: park until the keys exist (the client's deadline may abandon it first).
      client.parked = true;
      client.parked_type = *type;
      client.parked_keys = std::move(keys);
      if (!answer_if_ready(client)) return false;
    }
    if (!flush(client)) return false;
  }
  return true;
}

bool TcpStoreServer::answer_if_ready(Client& client) {
  if (!client.parked || !present(client.parked_keys)) return true;
  if (client.parked_type == std::uint8_t(StoreRequest::kGet)) {
    put_string(client.out, values_.at(client.parked_keys[0]));
  } else {
    client.out.push_back(0);
  }
  client.parked = false;
  client.parked_keys.clear();
  return flush(client);
}

bool TcpStoreServer::flush(Client& client) {
  std::size_t sent = 0;
  while (sent < client.out.size()) {
    const ssize_t n = ::send(client.socket.fd(), client.out.data() + sent, client.out.size() - sent,
                             MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;  // the rest goes when poll() reports POLLOUT
    } else {
      return false;
    }
  }
  client.out.erase(0, sent);
  return true;
}

bool TcpStoreServer::present(const std::vector<std::string>& keys) const {
  for (const auto& key : keys) {
    if (values_.find(key) == values_.end()) return false;
  }
  return true;
}

}  // namespace gradsync::tcp
