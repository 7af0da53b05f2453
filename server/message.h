// The shard's messages as plain values, so the protocol logic can be driven without sockets:
// a Buffer is bytes plus whatever keeps them alive, an Outgoing is one reply to one worker.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/wire_format.h"

namespace gradsync {

// Bytes and their owner: a received ZeroMQ frame, a parameter snapshot being sent, a test's
// vector. Copying a Buffer shares the owner, never the bytes. An empty owner means the bytes
// belong to someone who guarantees they outlive every use (the PsClient caller's spans).
struct Buffer {
  std::span<const std::byte> bytes;
  std::shared_ptr<const void> owner;

  std::size_t size() const { return bytes.size(); }
  static Buffer copy_of(std::string_view text);
  static Buffer copy_of(std::span<const std::byte> data);
};

// One message from the shard to the worker whose main socket has routing id `peer`.
struct Outgoing {
  std::string peer;
  wire::Header header;
  Buffer payload;  // absent (size 0) unless header.payload_bytes > 0
  int rank = -1;   // the worker a REPLY answers, for the trace (server/shard_trace.h)

  // "REPLY from 0 step 3 keys [0, 512) payload 2048 B aux 0 to 00800041a7"
  std::string to_string() const;
};

// A routing id as lowercase hex, for logs ("00800041a7").
std::string peer_hex(std::string_view peer);

// An ERROR message carrying `text` (cut to the wire's 4096-byte limit).
Outgoing make_error(const std::string& peer, std::uint32_t shard, std::uint64_t key_begin,
                    std::uint64_t key_end, std::string_view text);

}  // namespace gradsync
