// The run's id (common/run_id.h): the environment's when set and well-formed, else the hash of
// the configuration every process of the run resolves alike.
#include <doctest/doctest.h>
#include <stdlib.h>

#include "common/error.h"
#include "common/run_id.h"

using namespace gradsync;

namespace {

struct RunIdEnv {
  explicit RunIdEnv(const char* value) { ::setenv(kRunIdEnv, value, 1); }
  ~RunIdEnv() { ::unsetenv(kRunIdEnv); }
};

}  // namespace

TEST_CASE("run id: GRADSYNC_RUN_ID wins, in hex, and a malformed one is one line naming it") {
  ::unsetenv(kRunIdEnv);
  CHECK(!run_id_from_env());
  {
    RunIdEnv env("00C0ffee12345678");
    CHECK(run_id_from_env() == 0x00c0ffee12345678ull);
    CHECK(run_id_for("strategy: ps\n") == 0x00c0ffee12345678ull);
  }
  for (const char* bad : {"", "0", "xyz", "12345678123456789", "-1", "0x12"}) {
    CAPTURE(bad);
    RunIdEnv env(bad);
    const std::string expected = "environment: GRADSYNC_RUN_ID: '" + std::string(bad) +
                                 "' is not a run id (1 to 16 hex digits, not all zero)";
    CHECK_THROWS_WITH_AS(run_id_from_env(), expected.c_str(), ConfigError);
  }
  const std::uint64_t drawn = draw_run_id();
  CHECK(drawn != 0);
  CHECK(drawn != draw_run_id());
  RunIdEnv env(run_id_text(drawn).c_str());
  CHECK(run_id_from_env() == drawn);  // the text round-trips
}

TEST_CASE("run id: without the variable, one configuration is one run") {
  ::unsetenv(kRunIdEnv);
  const std::string yaml = "strategy: ps\nworkers: 2\n";
  CHECK(run_id_for(yaml) == run_id_for(std::string(yaml)));
  CHECK(run_id_for(yaml) == config_run_id(yaml));
  CHECK(run_id_for(yaml) != run_id_for("strategy: ps\nworkers: 3\n"));
  CHECK(config_run_id("") != 0);
}
