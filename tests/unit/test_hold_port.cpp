// tcp::hold_port: a port held for a listener another process opens (under mpirun, where no
// bound socket can be handed down).
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "allreduce/tcp/socket.h"
#include "common/error.h"

TEST_CASE("hold port: a held port refuses every other binder but the listener that shares it") {
  using namespace gradsync::tcp;
  const Socket held = hold_port("127.0.0.1");
  const int port = local_port(held);
  CHECK(port > 0);
  // Another program, with or without SO_REUSEADDR (as a server restarting on its port sets it).
  CHECK_THROWS_WITH_AS(listen_on("127.0.0.1", port), doctest::Contains("Address already in use"),
                       gradsync::Error);
  // The listener the port was held for takes it, and connections reach it (not the holder).
  const Socket listener = listen_on("127.0.0.1", port, {}, /*held=*/true);
  CHECK(local_port(listener) == port);
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  std::string why;
  const Socket client = connect_with_retry("127.0.0.1", port, deadline, why);
  REQUIRE(client.valid());
  CHECK(accept_until(listener, deadline).valid());
}
