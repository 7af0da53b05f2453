// Drives the parameter-server shard in unit tests: ShardState on a fake clock, played by
// workers as PsClient would (Driver), and the shard's log lines collected for checks (Log).
#pragma once

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "server/shard_state.h"
#include "strategies/ps/ps_client.h"
#include "tests/support/shard_options.h"

namespace gradsync::testing {

using namespace std::chrono_literals;

using Clock = std::chrono::steady_clock;
using Mode = PsShardOptions::Mode;
using wire::MessageType;

// The shard's log lines, written from its threads, read by the test.
struct Log {
  std::mutex mutex;
  std::string text;
  std::size_t lines = 0;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& line) {
      std::scoped_lock lock(mutex);
      text += line + "\n";
      ++lines;
    };
  }
  bool has(const std::string& needle) {
    std::scoped_lock lock(mutex);
    return text.find(needle) != std::string::npos;
  }
  std::size_t size() {
    std::scoped_lock lock(mutex);
    return lines;
  }
};

inline PsShardOptions options_for(int world, std::uint64_t model, Mode mode, Log& log, int s = 0) {
  PsShardOptions o = test_shard_options(world, model, mode, s, 500ms);
  o.log = log.sink();
  return o;
}

inline Buffer header_frame(const wire::Header& h) {
  std::array<std::byte, wire::kHeaderBytes> bytes;
  wire::encode_header(h, bytes);
  return Buffer::copy_of(bytes);
}

inline Buffer floats_frame(std::size_t n, float value) {
  std::vector<float> v(n, value);
  return Buffer::copy_of(std::as_bytes(std::span<const float>(v)));
}

// Plays workers against one ShardState; worker r's connection is called "w<r>".
struct Driver {
  ShardState& state;
  std::uint64_t model;
  Clock::time_point now = Clock::now();

  std::vector<Outgoing> send(int rank, const wire::Header& h, std::optional<Buffer> payload = {}) {
    std::vector<Buffer> frames{header_frame(h)};
    if (payload) frames.push_back(*payload);
    const std::string peer{'w', static_cast<char>('0' + rank)};  // ranks < 10 here
    return state.on_message(peer, frames, now);
  }
  std::vector<Outgoing> hello(int rank, int world, std::uint64_t model_size) {
    return send(rank, wire::make_header(MessageType::kHello, rank, 0, 0, model_size, 0, world));
  }
  std::vector<Outgoing> keys(MessageType type, int rank, std::uint64_t step = 0, float v = 0,
                             std::optional<KeyRange> range = {}) {
    const KeyRange r = range.value_or(state.range());
    const bool floats = type != MessageType::kPull;
    const auto h = wire::make_header(type, rank, step, r.begin, r.end, floats ? 4 * r.size() : 0);
    return floats ? send(rank, h, floats_frame(r.size(), v)) : send(rank, h);
  }
  std::vector<Outgoing> init(float value) { return keys(MessageType::kInit, 0, 0, value); }
  std::vector<Outgoing> pull(int rank) { return keys(MessageType::kPull, rank); }
  // One PUSHPULL of chunk c (wire_format.h: a push carries one chunk of the shard's range).
  std::vector<Outgoing> push_chunk(int rank, std::uint64_t step, std::size_t c, float value) {
    return keys(MessageType::kPushPull, rank, step, value, chunk_ranges(state.range()).at(c));
  }
  // A whole push_pull: every chunk in order, as PsClient sends them; all the replies caused.
  std::vector<Outgoing> push(int rank, std::uint64_t step, float value) {
    std::vector<Outgoing> all;
    for (std::size_t c = 0; c < chunk_ranges(state.range()).size(); ++c) {
      for (Outgoing& out : push_chunk(rank, step, c, value)) all.push_back(std::move(out));
    }
    return all;
  }
  // Every rank says HELLO, then rank 0 sends INIT with `value` everywhere.
  void start(int world, float value) {
    for (int r = 0; r < world; ++r) REQUIRE(hello(r, world, model).size() == 1);
    REQUIRE(!init(value).empty());
  }
};

inline std::string error_text(const Outgoing& out) {
  REQUIRE(out.header.type == MessageType::kError);
  return {reinterpret_cast<const char*>(out.payload.bytes.data()), out.payload.size()};
}

inline float first_param(const Outgoing& out) {
  return *reinterpret_cast<const float*>(out.payload.bytes.data());
}

}  // namespace gradsync::testing
