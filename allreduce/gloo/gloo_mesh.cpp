#include "allreduce/gloo/gloo_mesh.h"

#include <arpa/inet.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cctype>
#include <sstream>
#include <vector>

#include "allreduce/gloo/gloo_messages.h"
#include "allreduce/gloo/gloo_store.h"
#include "allreduce/gloo/sigpipe_blocked.h"
#include "allreduce/gloo/socket_lookup.h"
#include "allreduce/tcp/socket.h"
#include "common/error.h"

namespace gradsync::gloo {
namespace {

// The slot of the receive close() posts and abandons: far above the slots Gloo's collectives use
// (a one-byte prefix above their tags, or the context's small slot counter).
constexpr std::uint64_t kCloseSlot = ~std::uint64_t(0);
// The slot of close_after_peers()'s goodbyes, just below it.
constexpr std::uint64_t kGoodbyeSlot = kCloseSlot - 1;

// "ip:port" of a Gloo TCP address ("[ip6]:port"); Gloo's own str() prints the port in network
// byte order.
std::string endpoint_of(const ::gloo::transport::tcp::Address& address) {
  return tcp::format_address(address.getSockaddr());
}

// "[127.0.0.1]:4100" is no match for "[127.0.0.1]:41007".
bool names_address(const std::string& message, const std::string& name) {
  if (name.empty()) return false;
  for (auto at = message.find(name); at != std::string::npos; at = message.find(name, at + 1)) {
    const std::size_t end = at + name.size();
    if (end == message.size() || !std::isdigit(static_cast<unsigned char>(message[end]))) {
      return true;
    }
  }
  return false;
}

}  // namespace

GlooMesh::GlooMesh(Store& store, int rank, int size, const GlooOptions& options,
                   std::chrono::milliseconds grace)
    : store_(store),
      rank_(rank),
      size_(size),
      options_(options),
      grace_(grace),
      me_("rank " + std::to_string(rank)) {
  join();
}

// Connects the full mesh through the gradsync Store, then learns each peer's address as Gloo's
// messages will print it; the same again for the sync pairs, where asked for.
void GlooMesh::join() {
  // Gloo's event loop starts in CreateDevice and keeps this thread's mask: SIGPIPE blocked.
  const SigpipeBlocked no_sigpipe;
  try {
    ::gloo::transport::tcp::attr attr;
    attr.hostname = options_.bind_host;
    attr.ai_family = AF_INET;  // the address TcpRing binds too, never an IPv6 alternative
    device_ = ::gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw Error(me_ + ": gloo cannot open a TCP device on bind_host '" + options_.bind_host +
                "': " + without_source_prefix(e.what()));
  }
  peers_.resize(std::size_t(size_));
  context_ = connect(options_.store_prefix);
  learn_listening_addresses(options_.store_prefix);
  if (options_.pairs != "async") join_sync_mesh();
  // Gloo's messages may name the far end of a connection by the address it connected from,
  // which only that end knows (an ephemeral port): each rank publishes the local address of
  // each of its connections, one line per rank (the sync pair's after a space), for its peers
  // to read if they fail.
  std::string names;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) {
      names += context_->getPair(r)->address().str();
      if (sync_context_) names += ' ' + sync_context_->getPair(r)->address().str();
    }
    names += '\n';
  }
  store_.set(names_key(rank_), names);
}

std::shared_ptr<::gloo::Context> GlooMesh::connect(const std::string& prefix) {
  auto context = std::make_shared<::gloo::rendezvous::Context>(rank_, size_);
  // Every pair gets this timeout for each of its waits; collectives get theirs again.
  context->setTimeout(options_.timeout);
  GlooStore rendezvous(store_, prefix, options_.timeout);
  try {
    context->connectFullMesh(rendezvous, device_);
  } catch (const Error&) {
    throw;  // the gradsync Store's own error: a TimeoutError names the missing keys
  } catch (const std::exception& e) {
    const std::string gloo = without_source_prefix(e.what());
    const std::string what =
        "gloo rendezvous (connecting the full mesh of " + std::to_string(size_) + " ranks)";
    if (is_gloo_timeout(gloo)) throw TimeoutError(rank_, options_.bind_host, what, gloo);
    throw PeerError(rank_, options_.bind_host, what, gloo);
  }
  return context;
}

// Rank r published the addresses of its pairs under "<prefix>/<r>", one per other rank in rank
// order without itself; ours is at our rank, less one if we come after r: the address r
// listened on for us. The first mesh's is the endpoint our errors give.
void GlooMesh::learn_listening_addresses(const std::string& prefix) {
  GlooStore rendezvous(store_, prefix, options_.timeout);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const std::string all = store_.get(rendezvous.full_key(std::to_string(r)), options_.timeout);
    const std::size_t width = all.size() / std::size_t(size_ - 1);
    const std::size_t slot = std::size_t(rank_ > r ? rank_ - 1 : rank_);
    const ::gloo::transport::tcp::Address address(
        std::vector<char>(all.begin() + slot * width, all.begin() + (slot + 1) * width));
    Peer& peer = peers_[std::size_t(r)];
    if (peer.endpoint.empty()) peer.endpoint = endpoint_of(address);
    peer.gloo_names.push_back(address.str());
  }
}

// Each rank publishes under "<store_prefix>/sync/ends/<rank>" the floats one call may carry on
// its host, then the local address of its connection to each rank, a line per rank. Every rank
// cuts its allreduces by the smallest of those (the ranks must cut the same pieces: each is a
// Gloo construction, taking the same slots on every rank), and finds each connection's socket by
// its two ends (a connecting socket's local port may be shared with connections elsewhere).
void GlooMesh::join_sync_mesh() {
  const std::string prefix = options_.store_prefix + "/sync";
  sync_context_ = connect(prefix);
  learn_listening_addresses(prefix);
  auto local_end = [&](int r) {
    const auto& address =
        static_cast<const ::gloo::transport::tcp::Address&>(sync_context_->getPair(r)->address());
    return tcp::format_address(address.getSockaddr());
  };
  auto ends_key = [&](int r) { return prefix + "/ends/" + std::to_string(r); };
  const std::size_t bytes =
      options_.sync_piece_bytes > 0 ? options_.sync_piece_bytes : largest_unread_send();
  sync_message_floats_ = std::max<std::size_t>(bytes / sizeof(float), 1024);
  std::string mine = std::to_string(sync_message_floats_) + '\n';
  for (int r = 0; r < size_; ++r) mine += (r == rank_ ? std::string() : local_end(r)) + '\n';
  store_.set(ends_key(rank_), mine);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    std::istringstream lines(store_.get(ends_key(r), options_.timeout));
    std::vector<std::string> theirs;
    for (std::string line; std::getline(lines, line);) theirs.push_back(line);
    if (theirs.size() != std::size_t(size_) + 1) {
      throw Error(me_ + ": gloo sync pairs: rank " + std::to_string(r) + " published " +
                  std::to_string(theirs.size()) + " lines under " + ends_key(r) + ", not " +
                  std::to_string(size_ + 1));
    }
    sync_message_floats_ = std::min<std::size_t>(sync_message_floats_, std::stoull(theirs[0]));
    const std::string& peer_end = theirs[std::size_t(rank_) + 1];
    tcp::Socket socket = duplicate_connection(local_end(r), peer_end);
    if (!socket.valid()) {
      throw Error(me_ + ": gloo sync pair to rank " + std::to_string(r) +
                  ": no socket of this process connects " + local_end(r) + " to " + peer_end +
                  " (closing needs it to wake a blocked read)");
    }
    sync_sockets_.push_back(std::move(socket));
    sync_context_->getPair(r)->setSync(true, options_.pairs == "busy_poll");
  }
}

void GlooMesh::limit_sync_waits(std::chrono::milliseconds left) {
  const auto ms = std::max<long long>(left.count(), 1);  // 0 would mean "wait forever"
  const timeval limit{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000 * 1000)};
  for (const tcp::Socket& socket : sync_sockets_) {
    ::setsockopt(socket.fd(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    ::setsockopt(socket.fd(), SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  }
}

std::string GlooMesh::names_key(int rank) const {
  return options_.store_prefix + "/addresses/" + std::to_string(rank);
}

// How Gloo's messages here may name `peer` (Peer::gloo_names): the address it connected from is
// read, once, from what it published at joining, when a failure first needs it.
const std::vector<std::string>& GlooMesh::gloo_names(int peer) {
  Peer& p = peers_[std::size_t(peer)];
  if (!p.published_read) {
    p.published_read = true;
    try {
      const std::string lines = store_.get(names_key(peer), grace_);
      std::size_t begin = 0;
      for (int r = 0; r < rank_ && begin != std::string::npos; ++r) {
        begin = lines.find('\n', begin);
        if (begin != std::string::npos) ++begin;
      }
      if (begin != std::string::npos) {
        std::istringstream line(lines.substr(begin, lines.find('\n', begin) - begin));
        for (std::string name; line >> name;) p.gloo_names.push_back(name);
      }
    } catch (const std::exception&) {
      // The listening address alone, then.
    }
  }
  return p.gloo_names;
}

int GlooMesh::peer_named_in(const std::string& message) {
  if (!contains(message, "[")) return -1;  // an address is "[ip]:port"
  for (const bool published : {false, true}) {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const auto& names = published ? gloo_names(r) : peers_[std::size_t(r)].gloo_names;
      for (const std::string& name : names) {
        if (names_address(message, name)) return r;
      }
    }
  }
  return -1;
}

// Gloo does exactly this when one of its receives times out; its direct handle
// (tcp::Pair::signalExceptionExternal) is protected, and Debian's headers for the tcp pair do not
// compile (gloo/common/memory.h is not packaged). So this posts a receive nobody will send to, on
// the first pair still open, and lets its wait time out at once: Gloo then closes every pair of
// the context. Pairs and context take their own locks.
//
// Sync pairs first: shutting their sockets down wakes a thread blocked reading one, which Gloo's
// own close would wait for; the peer reads end-of-file.
void GlooMesh::close() {
  if (!context_) return;
  std::lock_guard lock(close_mutex_);
  for (tcp::Socket& socket : sync_sockets_) socket.shutdown();
  const SigpipeBlocked no_sigpipe;  // posting the receive writes to the peer
  char scratch = 0;
  const auto buffer = context_->createUnboundBuffer(&scratch, sizeof scratch);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    try {
      buffer->recv(r, kCloseSlot);
    } catch (const std::exception&) {
      continue;  // that pair has failed already, and is closed
    }
    try {
      buffer->waitRecv(nullptr, std::chrono::milliseconds(0));
    } catch (const std::exception&) {
      // The timeout it was meant to have: every pair of the context is closed now.
    }
    return;
  }
}

// Each goodbye is one byte at the sender's rank; both the receives and the sends must complete:
// a peer that has all goodbyes but whose own is still queued here would otherwise wait for it in
// vain. Errors only end the goodbye early: the connections close either way.
void GlooMesh::close_after_peers(std::chrono::milliseconds within) {
  if (!context_) return;
  const auto deadline = std::chrono::steady_clock::now() + within;
  auto left = [&] {
    const auto ms =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    return std::max(ms, std::chrono::milliseconds(1));
  };
  try {
    const SigpipeBlocked no_sigpipe;
    std::vector<char> bytes(std::size_t(size_), 0);
    const auto buffer = context_->createUnboundBuffer(bytes.data(), bytes.size());
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      buffer->recv(r, kGoodbyeSlot, std::size_t(r), 1);
      buffer->send(r, kGoodbyeSlot, std::size_t(rank_), 1);
    }
    for (int i = 1; i < size_; ++i) buffer->waitRecv(nullptr, left());
    for (int i = 1; i < size_; ++i) buffer->waitSend(nullptr, left());
  } catch (const std::exception&) {
    // A peer gone or late; a wait that timed out has closed every pair already (Gloo's doing).
  }
  close();
}

}  // namespace gradsync::gloo
