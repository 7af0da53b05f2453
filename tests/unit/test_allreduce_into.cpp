// allreduce_into, out of place, over TcpRing and (where built) Gloo under each of its
// algorithms: N ranks as N threads of this process, 1..4 of them, through one InMemoryStore.
// The checks themselves are tests/support/allreduce_into_checks.h's.
#include <doctest/doctest.h>

#include <string>

#include "allreduce/in_memory_store.h"
#include "allreduce/make_communicator.h"
#include "allreduce/tcp/tcp_ring.h"
#include "tests/support/allreduce_into_checks.h"
#include "tests/support/ring_ranks.h"
#ifdef GRADSYNC_HAVE_GLOO
#include "allreduce/gloo/gloo_communicator.h"
#endif

using namespace gradsync::testing;
using namespace std::chrono_literals;

TEST_CASE("tcp ring: allreduce_into is exact, leaves its input, and matches in place bitwise") {
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    gradsync::InMemoryStore store;
    run_ranks(n, [&](int r) {
      auto comm = gradsync::make_tcp_ring(store, r, n, ring_options());
      for (std::size_t length : allreduce_into_lengths(n)) check_allreduce_into(*comm, length);
      check_allreduce_into_refusals(*comm);
    });
  }
}

#ifdef GRADSYNC_HAVE_GLOO
TEST_CASE("gloo: allreduce_into is exact, leaves its input, and matches in place bitwise") {
  for (const std::string& algorithm : gradsync::gloo_algorithms()) {
    for (int n = 1; n <= 4; ++n) {
      CAPTURE(algorithm);
      CAPTURE(n);
      gradsync::InMemoryStore store;
      run_ranks(n, [&](int r) {
        gradsync::GlooOptions options;
        options.algorithm = algorithm;
        options.timeout = 20s;
        auto comm = gradsync::make_gloo_communicator(store, r, n, options);
        for (std::size_t length : allreduce_into_lengths(n)) check_allreduce_into(*comm, length);
        check_allreduce_into_refusals(*comm);
      });
    }
  }
}
#endif
