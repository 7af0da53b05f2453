// CURVE key files: "public <z85>" and "secret <z85>" lines (format in curve_keys.h).
#include "server/curve_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <zmq.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace gradsync {
namespace {

constexpr std::size_t kZ85KeyChars = 40;  // Z85 text of a 32-byte CURVE key

bool is_z85_key(const std::string& text) {
  if (text.size() != kZ85KeyChars) return false;
  std::uint8_t binary[32];
  return zmq_z85_decode(binary, text.c_str()) != nullptr;
}

}  // namespace

CurveKeys read_curve_keys(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path, "curve", std::string("cannot open: ") + std::strerror(errno));
  CurveKeys keys;
  int public_line = 0;
  int secret_line = 0;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string where = path + ":" + std::to_string(number);
    std::istringstream words(line);
    std::string name, value, rest;
    words >> name >> value >> rest;
    if (name.empty() || name[0] == '#') continue;
    if (name != "public" && name != "secret") {
      throw ConfigError(where, name, "unknown line: expected \"public <key>\" or \"secret <key>\"");
    }
    // Never echo the value: the line may hold a secret key.
    if (value.empty() || !rest.empty() || !is_z85_key(value)) {
      throw ConfigError(where, name, "expected one key of 40 Z85 characters after '" + name + "'");
    }
    int& seen = name == "public" ? public_line : secret_line;
    if (seen != 0) {
      throw ConfigError(where, name, "repeated (first on line " + std::to_string(seen) + ")");
    }
    seen = number;
    (name == "public" ? keys.public_key : keys.secret_key) = value;
  }
  if (public_line == 0) throw ConfigError(path, "public", "missing: no \"public <key>\" line");
  if (secret_line != 0) {
    // A pair whose halves do not belong together would fail every handshake with no clue why.
    char derived[kZ85KeyChars + 1];
    if (zmq_curve_public(derived, keys.secret_key.c_str()) != 0 || keys.public_key != derived) {
      throw ConfigError(path + ":" + std::to_string(public_line), "public",
                        "does not belong to the secret key on line " + std::to_string(secret_line));
    }
  }
  return keys;
}

CurveKeys generate_curve_keys() {
  char public_key[kZ85KeyChars + 1];
  char secret_key[kZ85KeyChars + 1];
  if (zmq_curve_keypair(public_key, secret_key) != 0) {
    throw Error(std::string("cannot generate a CURVE key pair: ") + zmq_strerror(zmq_errno()) +
                " (is libzmq built with CURVE support?)");
  }
  return {public_key, secret_key};
}

void write_curve_keys(const std::string& path, const CurveKeys& keys) {
  // Created 0600 from the start rather than chmod-ed after, so the secret is never readable by
  // others, not even briefly; and never over an existing file, since replacing a key locks out
  // every holder of the old one.
  std::FILE* file = nullptr;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) file = ::fdopen(fd, "w");
  if (file == nullptr) {
    throw Error(path + ": cannot create the CURVE key file: " + std::strerror(errno));
  }
  std::fprintf(file,
               "# gradsync CURVE key pair: give this file to every shard and every worker.\n"
               "# Keep it private: anyone with the secret line can join the run.\n"
               "public %s\n",
               keys.public_key.c_str());
  if (!keys.secret_key.empty()) std::fprintf(file, "secret %s\n", keys.secret_key.c_str());
  const bool ok = std::fflush(file) == 0 && std::ferror(file) == 0;
  if (std::fclose(file) != 0 || !ok) {
    throw Error(path + ": cannot write the CURVE key file: " + std::strerror(errno));
  }
}

}  // namespace gradsync
