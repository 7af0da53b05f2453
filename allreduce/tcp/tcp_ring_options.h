// What a TcpRing is made with (tcp_ring.h): its own header, since forming the ring
// (ring_links.h) reads it too, and tcp_ring.cpp includes ring_links.h.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "common/link.h"

namespace gradsync {

struct TcpRingOptions {
  std::chrono::milliseconds timeout{60000};
  std::string bind_host = "127.0.0.1";  // this rank's listening address for its left neighbour
  std::size_t chunk_bytes = 1 << 20;    // pipelining granularity of a segment
  std::string store_prefix = "ring";    // several communicators can share one Store
  std::shared_ptr<Link> link;   // network.link_gbps: caps payload bytes; null: none
};

}  // namespace gradsync
