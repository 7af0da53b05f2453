#include "allreduce/tcp/tcp_store.h"

#include <mutex>
#include <optional>
#include <vector>

#include "allreduce/tcp/socket.h"
#include "allreduce/tcp/store_protocol.h"
#include "allreduce/tcp/tcp_store_server.h"
#include "common/error.h"

namespace gradsync {
namespace {

using tcp::Clock;
using tcp::IoStatus;
using tcp::Socket;

std::string join(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

std::string encode_keys(tcp::StoreRequest type, const std::vector<std::string>& keys) {
  std::string request(1, static_cast<char>(type));
  tcp::put_u32(request, static_cast<std::uint32_t>(keys.size()));
  for (const auto& key : keys) tcp::put_string(request, key);
  return request;
}

// A client of the store; on rank 0 it also owns the server. Calls from several threads run
// concurrently, each on its own connection from a small pool, so that one thread blocked in
// get() never holds up another thread's set().
class TcpStore final : public Store {
 public:
  explicit TcpStore(const TcpStoreOptions& options) : options_(options) {
    if (options.is_server && options.listen_fd >= 0) {
      server_ = std::make_unique<tcp::TcpStoreServer>(tcp::Socket(options.listen_fd));
      options_.port = server_->port();
    } else if (options.is_server) {
      server_ = std::make_unique<tcp::TcpStoreServer>(options.host, options.port);
      options_.port = server_->port();  // port 0 asked for an ephemeral one
    }
    endpoint_ = tcp::format_endpoint(options_.host, options_.port);
  }

  void set(const std::string& key, const std::string& value) override {
    std::string request(1, static_cast<char>(tcp::StoreRequest::kSet));
    tcp::put_string(request, key);
    tcp::put_string(request, value);
    char ok = 0;
    call("set " + key, request, options_.timeout, &ok, 1, [&] {
      return "no acknowledgement within " + std::to_string(options_.timeout.count()) +
             " ms from the store at " + endpoint_;
    });
  }

  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::string request(1, static_cast<char>(tcp::StoreRequest::kGet));
    tcp::put_string(request, key);
    std::string value;
    call(
        "get " + key, request, timeout, nullptr, 0, [&] { return missing_message({key}, timeout); },
        &value);
    return value;
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    if (keys.empty()) return;
    char ok = 0;
    call("wait", encode_keys(tcp::StoreRequest::kWait, keys), timeout, &ok, 1,
         [&] { return missing_message(keys, timeout); });
  }

  bool check(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    return missing(keys, timeout).empty();
  }

 private:
  // The keys of `keys` the store does not hold now (kCheck: the server never waits for one).
  std::vector<std::string> missing(const std::vector<std::string>& keys,
                                   std::chrono::milliseconds timeout) {
    if (keys.empty()) return {};
    std::string reply(4 + keys.size(), '\0');
    call("check", encode_keys(tcp::StoreRequest::kCheck, keys), timeout, reply.data(),
         reply.size(), [&] {
           return "no answer within " + std::to_string(timeout.count()) + " ms to a check of " +
                  join(keys) + " in the store at " + endpoint_;
         });
    std::vector<std::string> absent;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (reply[4 + i] == 0) absent.push_back(keys[i]);
    }
    return absent;
  }

  // Sends one request and reads its reply: `reply_size` fixed bytes into `reply`, or, when
  // `value` is given, a length-prefixed string. `on_timeout` composes the timeout's message.
  template <typename OnTimeout>
  void call(const std::string& operation, const std::string& request,
            std::chrono::milliseconds timeout, char* reply, std::size_t reply_size,
            OnTimeout on_timeout, std::string* value = nullptr) {
    const auto deadline = Clock::now() + timeout;
    Socket conn = take_connection(operation, deadline, timeout);
    tcp::IoResult r = tcp::send_all(conn.fd(), request.data(), request.size(), deadline);
    if (r.status == IoStatus::kOk && value == nullptr) {
      r = tcp::recv_all(conn.fd(), reply, reply_size, deadline);
    } else if (r.status == IoStatus::kOk) {
      char length[4];
      r = tcp::recv_all(conn.fd(), length, 4, deadline);
      if (r.status == IoStatus::kOk) {
        const std::uint32_t size = tcp::read_u32(length);
        if (size > tcp::kMaxValueBytes) {
          throw PeerError(0, endpoint_, "store " + operation,
                          "the store answered with a " + std::to_string(size) +
                              "-byte value, over the protocol's limit: not a gradsync store?");
        }
        value->resize(size);
        r = tcp::recv_all(conn.fd(), value->data(), value->size(), deadline);
      }
    }
    if (r.status == IoStatus::kTimeout) {
      // Closing this connection cancels the parked request on the server, so a late reply can
      // never be mistaken for the answer to this connection's next request.
      conn.close();
      throw TimeoutError(0, endpoint_, "store " + operation, on_timeout());
    }
    if (r.status == IoStatus::kClosed) {
      throw PeerError(0, endpoint_, "store " + operation,
                      "the store server closed the connection (" + r.detail + "; rank 0 died?)");
    }
    std::lock_guard lock(mutex_);
    idle_.push_back(std::move(conn));
  }

  Socket take_connection(const std::string& operation, Clock::time_point deadline,
                         std::chrono::milliseconds timeout) {
    {
      std::lock_guard lock(mutex_);
      if (!idle_.empty()) {
        Socket conn = std::move(idle_.back());
        idle_.pop_back();
        return conn;
      }
    }
    // Refused connections are retried until the deadline: rank 0 may start last.
    std::string last_error;
    Socket conn = tcp::connect_with_retry(options_.host, options_.port, deadline, last_error);
    if (!conn.valid()) {
      throw TimeoutError(0, endpoint_, "store " + operation,
                         "cannot reach the store at " + endpoint_ + " after " +
                             std::to_string(timeout.count()) + " ms (" + last_error +
                             "); is rank 0 running and MASTER_ADDR / MASTER_PORT right?");
    }
    tcp::tune_socket(conn.fd());
    std::string hello;
    tcp::put_u32(hello, tcp::kStoreMagic);
    tcp::put_u32(hello, tcp::kStoreVersion);
    const tcp::IoResult r = tcp::send_all(conn.fd(), hello.data(), hello.size(), deadline);
    if (r.status != IoStatus::kOk) {
      throw PeerError(0, endpoint_, "store " + operation, "cannot greet the store: " + r.detail);
    }
    return conn;
  }

  // Names the keys that are still missing, asked with a short deadline of its own.
  std::string missing_message(const std::vector<std::string>& keys,
                              std::chrono::milliseconds timeout) {
    std::vector<std::string> absent = keys;
    try {
      absent = missing(keys, std::chrono::milliseconds(500));
    } catch (const Error&) {
      // Keep every key as "missing": the store did not answer the check either.
    }
    return "timed out after " + std::to_string(timeout.count()) + " ms waiting for key(s) " +
           join(absent) + " in the store at " + endpoint_;
  }

  TcpStoreOptions options_;
  std::string endpoint_;
  std::unique_ptr<tcp::TcpStoreServer> server_;  // declared first among owners: closed last
  std::mutex mutex_;
  std::vector<Socket> idle_;
};

}  // namespace

std::unique_ptr<Store> make_tcp_store(const TcpStoreOptions& options) {
  return std::make_unique<TcpStore>(options);
}

}  // namespace gradsync
