// CURVE key files (server/curve_keys.cpp): written owner-only and never over a file, read back
// whole, and every malformed file refused with its path, line and key.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/error.h"
#include "strategies/ps/ps_client.h"
#include "tests/support/temp_dir.h"

namespace gradsync {

using gradsync::testing::TempDir;

TEST_CASE("curve keys: key files round-trip, and errors name the file and line") {
  TempDir tmp;
  const std::filesystem::path& dir = tmp.path();
  const CurveKeys keys = generate_curve_keys();
  const std::string path = (dir / "run.keys").string(), bad = (dir / "bad.keys").string();
  write_curve_keys(path, keys);
  CHECK_THROWS_WITH(write_curve_keys(path, generate_curve_keys()), doctest::Contains(path.c_str()));
  const CurveKeys back = read_curve_keys(path);
  CHECK((back.public_key == keys.public_key && back.secret_key == keys.secret_key));
  CHECK((std::filesystem::status(path).permissions() & std::filesystem::perms::group_read) ==
        std::filesystem::perms::none);
  auto error_of = [&](const std::string& text) -> std::string {
    std::ofstream(bad) << text;
    try {
      read_curve_keys(bad);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string pub = "public " + keys.public_key + "\n";
  CHECK(error_of("# comment\n\npublik " + keys.public_key + "\n") ==
        bad + ":3: publik: unknown line: expected \"public <key>\" or \"secret <key>\"");
  CHECK(error_of("public abc\n").find(bad + ":1: public: expected one key of 40 Z85") == 0);
  CHECK(error_of("secret " + keys.secret_key + "\n") ==
        bad + ": public: missing: no \"public <key>\" line");
  CHECK(error_of("public " + generate_curve_keys().public_key + "\nsecret " + keys.secret_key)
            .find(bad + ":1: public: does not belong to the secret key on line 2") == 0);
  CHECK(error_of(pub + pub) == bad + ":2: public: repeated (first on line 1)");
  CHECK(error_of(pub) == "no error");  // a public key alone is readable
  CHECK_THROWS_WITH_AS(read_curve_keys((dir / "missing.keys").string()),
                       doctest::Contains("missing.keys: curve: cannot open"), ConfigError);
}

}  // namespace gradsync
