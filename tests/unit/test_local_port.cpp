#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "allreduce/tcp/socket.h"
#include "common/error.h"
#include "launch/local_port.h"

TEST_CASE("local port: drawn below the kernel's ephemeral range, or above it when no room") {
  using gradsync::port_draw_range;
  CHECK(port_draw_range({32768, 60999}) == std::pair{10000, 32767});
  CHECK(port_draw_range({10500, 60000}) == std::pair{60001, 65535});
  CHECK(port_draw_range({1024, 65000}) == std::pair{1024, 65535});
}

TEST_CASE("local port: the ephemeral range is read from the kernel's file, Linux's default if not") {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / ("gradsync-port-range-" + std::to_string(::getpid()))).string();
  {
    std::ofstream(path) << "40000\t50000\n";
  }
  CHECK(gradsync::ephemeral_port_range(path) == std::pair{40000, 50000});
  {
    std::ofstream(path) << "not numbers\n";
  }
  CHECK(gradsync::ephemeral_port_range(path) == std::pair{32768, 60999});
  std::remove(path.c_str());
  CHECK(gradsync::ephemeral_port_range(path) == std::pair{32768, 60999});
}

TEST_CASE("local port: a free port outside the ephemeral range that a listener can take") {
  const auto ephemeral = gradsync::ephemeral_port_range();
  const auto [first, last] = gradsync::port_draw_range(ephemeral);
  for (int i = 0; i < 20; ++i) {
    const int port = gradsync::free_local_port();
    CHECK(port >= first);
    CHECK(port <= last);
    const bool whole_space = first == 1024;  // no room outside the range on this machine
    if (!whole_space) CHECK((port < ephemeral.first || port > ephemeral.second));
    auto listener = gradsync::tcp::listen_on("127.0.0.1", port);
    CHECK(gradsync::tcp::local_port(listener) == port);
  }
}

TEST_CASE("local port: a held port refuses every other binder but the listener that shares it") {
  using namespace gradsync::tcp;
  const Socket held = hold_port("127.0.0.1");
  const int port = local_port(held);
  CHECK(port > 0);
  // Another program, with or without SO_REUSEADDR (as a server restarting on its port sets it).
  CHECK_THROWS_WITH_AS(listen_on("127.0.0.1", port),
                       doctest::Contains("Address already in use"), gradsync::Error);
  // The listener the port was held for takes it, and connections reach it (not the holder).
  const Socket listener = listen_on("127.0.0.1", port, 0, /*held=*/true);
  CHECK(local_port(listener) == port);
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  std::string why;
  const Socket client = connect_with_retry("127.0.0.1", port, deadline, why);
  REQUIRE(client.valid());
  CHECK(accept_until(listener, deadline).valid());
}
