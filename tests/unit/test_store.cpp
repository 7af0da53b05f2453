// The Store behind ring rendezvous: InMemoryStore (N ranks as N threads) and TcpStore (a server
// thread in rank 0, clients everywhere), across threads, with timeouts that name what is missing.
#include <doctest/doctest.h>
#include <sys/socket.h>

#include <future>
#include <string>
#include <thread>

#include "allreduce/in_memory_store.h"
#include "allreduce/tcp/socket.h"
#include "allreduce/tcp/tcp_store.h"
#include "common/error.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A port nobody listens on right now (the kernel's pick for an ephemeral bind, released).
int free_port(const std::string& host = "127.0.0.1") {
  auto probe = gradsync::tcp::listen_on(host, 0);
  return gradsync::tcp::local_port(probe);
}

gradsync::TcpStoreOptions store_options(int port, bool server,
                                        std::chrono::milliseconds timeout = 5s) {
  gradsync::TcpStoreOptions options;
  options.port = port;
  options.is_server = server;
  options.timeout = timeout;
  return options;
}

// Expects `call` to throw TimeoutError, and returns its message.
template <typename Call>
std::string timeout_message(Call call) {
  try {
    call();
  } catch (const gradsync::TimeoutError& e) {
    return e.what();
  }
  FAIL_CHECK("expected a TimeoutError");
  return "";
}

long long ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

}  // namespace

TEST_CASE("store: in-memory set, get and wait") {
  gradsync::InMemoryStore store;
  store.set("a", "1");
  store.set("b", std::string("\0x\0", 3));
  CHECK(store.get("a", 0ms) == "1");
  CHECK(store.get("b", 0ms) == std::string("\0x\0", 3));
  store.wait({"a", "b"}, 0ms);
  store.set("a", "2");  // overwrite
  CHECK(store.get("a", 0ms) == "2");
}

TEST_CASE("store: in-memory get blocks until another thread sets the key") {
  gradsync::InMemoryStore store;
  auto later = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(50ms);
    store.set("late", "here");
  });
  CHECK(store.get("late", 5s) == "here");
  later.get();
}

TEST_CASE("store: in-memory wait timeout names the missing keys, not the present ones") {
  gradsync::InMemoryStore store;
  store.set("ring/addr/0", "x");
  const auto start = Clock::now();
  const std::string message = timeout_message([&] {
    store.wait({"ring/addr/0", "ring/addr/1", "ring/addr/2"}, 100ms);
  });
  CHECK(ms_since(start) >= 90);
  CHECK(message.find("ring/addr/1, ring/addr/2") != std::string::npos);
  CHECK(message.find("ring/addr/0") == std::string::npos);
}

TEST_CASE("store: tcp server and clients across threads") {
  const int port = free_port();
  auto server = gradsync::make_tcp_store(store_options(port, true));
  const int n = 4;
  std::vector<std::future<void>> ranks;
  for (int r = 1; r < n; ++r) {
    ranks.push_back(std::async(std::launch::async, [port, r] {
      auto client = gradsync::make_tcp_store(store_options(port, false));
      client->set("addr/" + std::to_string(r), "rank" + std::to_string(r));
      client->wait({"addr/0", "addr/1", "addr/2", "addr/3"}, 5s);
      for (int q = 1; q < 4; ++q) {
        CHECK(client->get("addr/" + std::to_string(q), 1s) == "rank" + std::to_string(q));
      }
      CHECK(client->get("binary", 5s) == std::string("\0\1\2\0", 4));
    }));
  }
  server->set("addr/0", "rank0");
  server->set("binary", std::string("\0\1\2\0", 4));
  // A large value (an NCCL id is 128 bytes; a value may be far bigger) goes through whole.
  std::string big(3 << 20, 'x');
  big[12345] = '\0';
  server->set("big", big);
  CHECK(server->get("big", 1s) == big);
  for (auto& f : ranks) CHECK(f.wait_for(10s) == std::future_status::ready);
  for (auto& f : ranks) f.get();
}

TEST_CASE("store: tcp get and wait time out naming the missing key and the store address") {
  const int port = free_port();
  auto server = gradsync::make_tcp_store(store_options(port, true));
  auto client = gradsync::make_tcp_store(store_options(port, false));
  client->set("present", "1");
  const auto start = Clock::now();
  std::string message = timeout_message([&] { client->get("absent", 200ms); });
  CHECK(ms_since(start) < 8000);  // the 200 ms given, not the minute-long default
  CHECK(message.find("absent") != std::string::npos);
  CHECK(message.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  message = timeout_message([&] { client->wait({"present", "missing/1", "missing/2"}, 200ms); });
  CHECK(message.find("missing/1, missing/2") != std::string::npos);
  CHECK(message.find("present") == std::string::npos);
  // The abandoned requests must not confuse the next ones.
  client->set("absent", "now");
  CHECK(client->get("absent", 1s) == "now");
  CHECK(client->get("present", 1s) == "1");
}

TEST_CASE("store: check says whether every key is there now, without waiting for one") {
  gradsync::InMemoryStore memory;
  const int port = free_port();
  auto server = gradsync::make_tcp_store(store_options(port, true));
  auto client = gradsync::make_tcp_store(store_options(port, false));
  for (gradsync::Store* store : {static_cast<gradsync::Store*>(&memory), client.get()}) {
    CHECK(store->check({}, 1s));
    const auto start = Clock::now();
    CHECK_FALSE(store->check({"stop/0", "stop/1"}, 10s));
    CHECK(ms_since(start) < 5000);  // answered at once, not after the timeout
    store->set("stop/0", "3");
    CHECK_FALSE(store->check({"stop/0", "stop/1"}, 1s));
    store->set("stop/1", "4");
    CHECK(store->check({"stop/0", "stop/1"}, 1s));
  }
}

TEST_CASE("store: tcp client retries until the server appears") {
  const int port = free_port();
  auto client_result = std::async(std::launch::async, [port] {
    auto client = gradsync::make_tcp_store(store_options(port, false));
    return client->get("hello", 5s);  // connection refused for a while: rank 0 starts last
  });
  std::this_thread::sleep_for(300ms);
  auto server = gradsync::make_tcp_store(store_options(port, true));
  server->set("hello", "world");
  REQUIRE(client_result.wait_for(10s) == std::future_status::ready);
  CHECK(client_result.get() == "world");
}

TEST_CASE("store: tcp client gives up naming host:port when no server runs") {
  const int port = free_port();
  auto client = gradsync::make_tcp_store(store_options(port, false, 300ms));
  const auto start = Clock::now();
  const std::string message = timeout_message([&] { client->set("k", "v"); });
  CHECK(ms_since(start) >= 250);
  CHECK(ms_since(start) < 2000);
  CHECK(message.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  CHECK(message.find("Connection refused") != std::string::npos);
}

TEST_CASE("store: tcp server survives garbage and binds only to its host") {
  // 127.0.0.2 is loopback too on Linux, but a different address: a server bound to it must not
  // answer on 127.0.0.1.
  const int port = free_port("127.0.0.2");
  auto options = store_options(port, true);
  options.host = "127.0.0.2";
  auto server = gradsync::make_tcp_store(options);
  {
    std::string error;
    auto raw = gradsync::tcp::connect_with_retry("127.0.0.2", port, Clock::now() + 1s, error);
    REQUIRE(raw.valid());
    const char junk[] = "GET / HTTP/1.0\r\n\r\n\xff\xff\xff\xff";
    ::send(raw.fd(), junk, sizeof(junk), MSG_NOSIGNAL);
    auto silent = gradsync::tcp::connect_with_retry("127.0.0.2", port, Clock::now() + 1s, error);
    REQUIRE(silent.valid());  // connects and closes without a word
  }
  auto client_options = store_options(port, false, 300ms);
  client_options.host = "127.0.0.2";
  auto client = gradsync::make_tcp_store(client_options);
  client->set("still", "alive");
  CHECK(client->get("still", 1s) == "alive");

  auto wrong_host = gradsync::make_tcp_store(store_options(port, false, 200ms));  // 127.0.0.1
  CHECK_THROWS_AS(wrong_host->get("still", 200ms), gradsync::TimeoutError);
}
