// The exception hierarchy every gradsync library throws (policy: docs/errors.md).
//
// Library code throws; only main() catches, prints one line to stderr and exits
// non-zero. Nothing below calls exit() or abort().
//
//   Error          root: what() is the whole one-line message
//   ConfigError    a preset or command-line value; names the file, key and line
//   DataError      a data file that cannot be read or is malformed; names the file
//   PeerError      another process did something wrong (issues on the network)
//   TimeoutError   a PeerError raised when a wait ran past its deadline
//   Interrupted    the user stopped a run (SIGINT, SIGTERM); main exits 128 + the signal
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>

namespace gradsync {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

class ConfigError : public Error {
 public:
  // `where` is "file:line" (or "--set" for a command-line override); `key` is the dotted key.
  ConfigError(const std::string& where, const std::string& key, const std::string& problem)
      : Error(where + ": " + key + ": " + problem), where_(where), key_(key) {}
  const std::string& where() const { return where_; }
  const std::string& key() const { return key_; }

 private:
  std::string where_;
  std::string key_;
};

class DataError : public Error {
 public:
  DataError(const std::string& file, const std::string& problem)
      : Error(file + ": " + problem), file_(file) {}
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

class PeerError : public Error {
 public:
  PeerError(int rank, const std::string& endpoint, const std::string& operation,
            const std::string& problem)
      : Error("rank " + std::to_string(rank) + " (" + endpoint + ") during " + operation + ": " +
              problem),
        rank_(rank) {}
  // A peer that is not a rank: `who` names it ("shard 2"), `index` is what rank() returns.
  PeerError(const std::string& who, int index, const std::string& endpoint,
            const std::string& operation, const std::string& problem)
      : Error(who + " (" + endpoint + ") during " + operation + ": " + problem), rank_(index) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

class TimeoutError : public PeerError {
 public:
  using PeerError::PeerError;
};

// The user stopped the run (SIGINT, SIGTERM): main exits 128 + signal, as a shell reports it.
class Interrupted : public Error {
 public:
  Interrupted(int signal, const std::string& message) : Error(message), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

// A timeout or an age as an error message says it: "0.5 s", "10.2 s", "60 s".
std::string seconds_text(std::chrono::duration<double> d);

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* condition,
                               const std::string& message);
}  // namespace detail

}  // namespace gradsync

// Checks an invariant of gradsync itself (not user input): throws gradsync::Error with file:line.
#define GRADSYNC_CHECK(cond, msg)                                                  \
  do {                                                                             \
    if (!(cond)) ::gradsync::detail::check_failed(__FILE__, __LINE__, #cond, msg); \
  } while (0)
