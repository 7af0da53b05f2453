// CURVE key files for the parameter server's encrypted links: read by shards and workers alike,
// written by `gradsync server --gen-keys`.
#pragma once

#include <string>

namespace gradsync {

// CURVE (libzmq's built-in encryption and authentication): a key pair in Z85 text.
struct CurveKeys {
  std::string public_key;  // 40 characters
  std::string secret_key;  // 40 characters
};

// Reads a key file: two lines "public <z85>" and "secret <z85>". The secret line may be absent
// (a file that only names a shard's key), but shards and workers both need the pair: a worker
// authenticates with the shared pair itself. Blank lines and lines starting with '#' are skipped.
// Throws ConfigError naming the file and the line (a key that is not 40 Z85 characters, a
// public key that does not belong to the secret key, an unknown or repeated line).
CurveKeys read_curve_keys(const std::string& path);

// A fresh key pair from libzmq (zmq_curve_keypair). Throws Error when libzmq lacks CURVE.
CurveKeys generate_curve_keys();

// Writes `keys` in read_curve_keys' format to a new file, readable by the owner only (mode
// 0600). Throws Error naming the path when it exists already or cannot be written.
void write_curve_keys(const std::string& path, const CurveKeys& keys);

}  // namespace gradsync
