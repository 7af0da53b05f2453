// Compiled only when CMake finds libgloo-dev (GRADSYNC_HAVE_GLOO); the only file that includes
// Gloo's headers besides gloo_store.h.
#include "allreduce/gloo/gloo_communicator.h"

#include <arpa/inet.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <climits>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>

#include "allreduce/gloo/gloo_store.h"
#include "allreduce/tcp/work_queue.h"
#include "common/error.h"

namespace gradsync {
namespace {

using std::chrono::milliseconds;

enum class Algorithm { kRing, kRingChunked, kHalvingDoubling };

// gloo_algorithms() in this order.
constexpr Algorithm kAlgorithms[] = {Algorithm::kRing, Algorithm::kRingChunked,
                                     Algorithm::kHalvingDoubling};

// Gloo's ring_chunked and halving_doubling count bytes in an int.
constexpr std::size_t kMaxIntCountFloats = INT_MAX / sizeof(float);

// gloo::sum<float> has overloads; this is the (out, a, b, n) one that AllreduceOptions wants.
void sum_floats(void* out, const void* a, const void* b, std::size_t n) {
  gloo::sum<float>(out, a, b, n);
}

// Gloo writes to its sockets with writev, without MSG_NOSIGNAL: writing to a peer that has gone
// raises SIGPIPE, which ends the process unless the thread that wrote blocks it (Python, Gloo's
// usual host, ignores it for the whole process; gradsync leaves the process's handlers alone).
// SIGPIPE is sent to the thread that wrote, so it is enough to block it on every thread that
// writes to Gloo's sockets: Gloo's event loop (it inherits the mask of the thread that creates
// the device), the queue's thread, and the caller of abort() or the destructor. Blocked, the
// write fails with EPIPE, which Gloo reports as an error like any other.
//
// For the scope of this object SIGPIPE is blocked on the calling thread; one raised meanwhile is
// taken off the thread's pending set before the old mask is restored, so it is never delivered.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlocked() {
    if (sigismember(&old_, SIGPIPE)) return;  // blocked before us: the caller's business
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
};

// Blocks SIGPIPE on the calling thread for good: the queue's thread, which is ours.
void block_sigpipe_on_this_thread() {
  thread_local const bool blocked = [] {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    return pthread_sigmask(SIG_BLOCK, &pipe, nullptr) == 0;
  }();
  (void)blocked;
}

// A collective's Gloo tag: a hash of "collective #<seq> <operation, size, root, algorithm>".
// Ranks that issue the same collective compute the same tag; ranks that disagree (another
// size, operation or root) use different tags, so that their messages never meet: each waits
// and times out. With equal tags Gloo would take the other's bytes, and a larger message than
// the receive expects fails an assertion on Gloo's event-loop thread, which ends the process.
// (Only one collective of a context is ever in flight, so tags need not be unique beyond it.)
std::uint32_t tag_of(const std::string& collective) {
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a, 64 bits, folded to 32
  for (const char c : collective) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return static_cast<std::uint32_t>(hash ^ (hash >> 32));
}

// The slot prefix of reduce_scatter's ring (Gloo's own collectives use 0x01..0x08, each with the
// tag below it, see gloo/types.h): its messages never meet another collective's.
constexpr std::uint8_t kReduceScatterSlotPrefix = 0x10;

// A wait of the reduce-scatter ring that timed out, and the peer it waited for: Gloo's timeout
// message names no one, and fail() would otherwise have no rank to blame.
struct PeerWaitTimeout : std::runtime_error {
  PeerWaitTimeout(const std::string& what, int peer) : std::runtime_error(what), peer(peer) {}
  int peer;
};

// The slot of the receive close_connections posts and abandons: far above the slots Gloo's
// collectives use (a one-byte prefix above their tags, or the context's small slot counter).
constexpr std::uint64_t kCloseSlot = ~std::uint64_t(0);

// Gloo prefixes its messages with "[<source file>:<line>] "; the file is Gloo's build path,
// noise in a gradsync error. (An address also starts with '[', but holds no '/'.)
std::string without_source_prefix(const std::string& message) {
  if (message.empty() || message[0] != '[') return message;
  const auto close = message.find("] ");
  if (close == std::string::npos || message.find('/') > close) return message;
  return message.substr(close + 2);
}

bool contains(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

// "ip:port" of a Gloo TCP address ("[ip6]:port"); Gloo's own str() prints the port in network
// byte order.
std::string endpoint_of(const gloo::transport::tcp::Address& address) {
  const sockaddr_storage& ss = address.getSockaddr();
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  const bool v6 = ss.ss_family == AF_INET6;
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (v6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
  }
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "[" + std::string(host).
  std::string endpoint = v6 ? "[" : "";
  endpoint += host;
  endpoint += v6 ? "]:" : ":";
  endpoint += std::to_string(port);
  return endpoint;
}

// PeerError or TimeoutError about `peer`; -1 (a peer Gloo's message does not name) takes
// PeerError's form for a peer that is no single rank.
template <typename E>
std::exception_ptr peer_error(int peer, const std::string& endpoint, const std::string& operation,
                              const std::string& problem) {
  if (peer >= 0) return std::make_exception_ptr(E(peer, endpoint, operation, problem));
  return std::make_exception_ptr(E("a peer", -1, "Gloo's message names none", operation, problem));
}

// What the errors say about another rank.
struct Peer {
  std::string endpoint;  // ip:port it listened on for us
  // How Gloo's messages here may print it: the address it listened on for us, or the address
  // it connected from. (Gloo's connect() overwrites the second with the first when the peer
  // connected before this rank called connect(): a race in its rendezvous.)
  std::vector<std::string> gloo_names;
  bool published_read = false;  // the second one, read from the Store once needed
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(Store& store, int rank, int size, const GlooOptions& options,
                   Algorithm algorithm)
      : store_(store),
        rank_(rank),
        size_(size),
        options_(options),
        algorithm_(algorithm),
        grace_(std::min(options.timeout, milliseconds(1000))),
        me_("rank " + std::to_string(rank)),
        queue_(rank, options.timeout, grace_) {
    if (size_ > 1) join();
  }

  // Never hangs: closing the connections wakes a running collective, which fails at once; then
  // the queue's thread is joined and what was still queued fails with "destroyed". The context
  // (its pairs) and the device (its event loop) go after the thread, in that order.
  ~GlooCommunicator() override {
    closing_ = true;
    close_connections();
    queue_.stop();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  milliseconds timeout() const override { return options_.timeout; }

  std::shared_ptr<Work> allreduce_async(std::span<float> data, ReduceOp op) override {
    const bool average = op == ReduceOp::kAvg;
    if (algorithm_ != Algorithm::kRing && data.size() > kMaxIntCountFloats && size_ > 1) {
      throw Error(me_ + ": gloo " + name(algorithm_) + " reduces at most " +
                  std::to_string(kMaxIntCountFloats) + " floats at once (Gloo counts its bytes " +
                  "in an int); this allreduce has " + std::to_string(data.size()) +
                  ": use the ring");
    }
    const std::uint64_t moved = ring_share(data.size_bytes(), 2);
    const std::string what = std::string("allreduce ") + (average ? "avg" : "sum") + " of " +
                             std::to_string(data.size()) + " floats (gloo " + name(algorithm_) +
                             ")";
    const bool runs = size_ > 1 && !data.empty();
    return issue(what, runs, moved, moved, [this, data, average](std::uint32_t tag) {
      reduce_sum(data, tag);
      // The average is the finished sum divided once, as TcpRing divides each finished segment:
      // every rank holds the same sum, so every rank ends with the same bits.
      if (average) {
        const float n = float(size_);
        for (float& x : data) x /= n;
      }
    });
  }

  std::shared_ptr<Work> broadcast_async(std::span<float> data, int root) override {
    GRADSYNC_CHECK(root >= 0 && root < size_, "broadcast root outside [0, size)");
    const std::uint64_t bytes = size_ > 1 ? data.size_bytes() : 0;
    const bool is_root = rank_ == root;
    const std::string what = "broadcast of " + std::to_string(data.size()) + " floats from rank " +
                             std::to_string(root) + " (gloo)";
    const bool runs = size_ > 1 && !data.empty();
    return issue(what, runs, is_root ? bytes : 0, is_root ? 0 : bytes,
                 [this, data, root](std::uint32_t tag) {
                   // In place: with no input buffer, the root sends from its output.
                   gloo::BroadcastOptions opts(context_);
                   opts.setOutput(data.data(), data.size());
                   opts.setRoot(root);
                   opts.setTag(tag);
                   opts.setTimeout(options_.timeout);
                   gloo::broadcast(opts);
                 });
  }

  std::shared_ptr<Work> allgather_async(std::span<const float> in, std::span<float> out) override {
    GRADSYNC_CHECK(out.size() == in.size() * std::size_t(size_),
                   "allgather: out.size() must be size() * in.size()");
    const std::uint64_t moved = ring_share(out.size_bytes(), 1);
    const std::string what =
        "allgather of " + std::to_string(in.size()) + " floats per rank (gloo)";
    // With one rank the input still lands in the output: a copy, no Gloo.
    const bool runs = !in.empty();
    return issue(what, runs, moved, moved, [this, in, out](std::uint32_t tag) {
      if (size_ == 1) {
        std::memmove(out.data(), in.data(), in.size_bytes());
        return;
      }
      gloo::AllgatherOptions opts(context_);
      // Gloo only reads the input; its setter takes a non-const pointer all the same.
      opts.setInput(const_cast<float*>(in.data()), in.size());
      opts.setOutput(out.data(), out.size());
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::allgather(opts);
    });
  }

  // Not Gloo's ReduceScatterHalvingDoubling (in Debian's gloo/reduce_scatter.h): it finds its
  // peers' messages by the context's slot counter, so ranks that disagree on the size end the
  // process (an assertion on Gloo's event-loop thread, tried with this Gloo), where every other
  // collective with the default ring times out; and its last phase writes the result over the
  // start of its buffer without waiting for earlier sends from there to leave. Instead, the
  // reduce-scatter half of a ring over Gloo's tagged unbound buffers: see ring_reduce_scatter.
  std::shared_ptr<Work> reduce_scatter_async(std::span<const float> in, std::span<float> out,
                                             ReduceOp op) override {
    GRADSYNC_CHECK(in.size() == out.size() * std::size_t(size_),
                   "reduce_scatter: in.size() must be size() * out.size(), but in has " +
                       std::to_string(in.size()) + " floats, out " + std::to_string(out.size()) +
                       ", over " + std::to_string(size_) + " ranks");
    const bool average = op == ReduceOp::kAvg;
    const std::uint64_t moved = ring_share(in.size_bytes(), 1);
    // The size and the op go into the tag: ranks that disagree on either time out.
    const std::string what = std::string("reduce-scatter ") + (average ? "avg" : "sum") + " of " +
                             std::to_string(in.size()) + " floats (gloo ring)";
    // With one rank the input still lands in the output: a copy, no Gloo.
    const bool runs = !in.empty();
    return issue(what, runs, moved, moved, [this, in, out, average](std::uint32_t tag) {
      if (size_ == 1) {
        std::memmove(out.data(), in.data(), in.size_bytes());
        return;
      }
      // The ring adds into the blocks it sends on, and `in` is the caller's, read-only.
      std::vector<float> sums(in.begin(), in.end());
      ring_reduce_scatter(sums, out.size(), tag);
      const std::span<const float> mine =
          std::span<const float>(sums).subspan(std::size_t(rank_) * out.size(), out.size());
      // The finished sum divided once, as allreduce divides it here.
      const float n = float(size_);
      for (std::size_t i = 0; i < mine.size(); ++i) out[i] = average ? mine[i] / n : mine[i];
    });
  }

  std::shared_ptr<Work> barrier_async() override {
    return issue("barrier (gloo)", size_ > 1, 0, 0, [this](std::uint32_t tag) {
      gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::barrier(opts);
    });
  }

  void abort(const std::string& reason) override {
    {
      std::lock_guard lock(abort_mutex_);
      if (aborted_) return;
      abort_reason_ = reason;
      aborted_ = true;  // after the reason: the queue's thread reads it once it sees this
    }
    // The report first, the connections after: a peer that reads end-of-file finds it at once.
    publish_failure("abort", me_ + " aborted: " + reason);
    close_connections();
  }

  // Bytes this rank moves in a bandwidth-optimal algorithm (NcclCommunicator's formulas):
  // allreduce 2(N-1)/N of the buffer each way, allgather (N-1)/N of the output each way,
  // broadcast the buffer out of the root and into every other rank, barrier nothing. Gloo's
  // ring and halving-doubling move about that; the counters say what the schedule must move.
  CommCounters counters() const override {
    CommCounters c;
    c.bytes_sent = bytes_sent_.load();
    c.bytes_received = bytes_received_.load();
    c.collectives = collectives_.load();
    return c;
  }

 private:
  static std::string name(Algorithm algorithm) { return gloo_algorithms()[std::size_t(algorithm)]; }

  std::uint64_t ring_share(std::uint64_t bytes, int factor) const {
    return size_ <= 1
               ? 0
               : bytes * std::uint64_t(factor) * std::uint64_t(size_ - 1) / std::uint64_t(size_);
  }

  // Connects the full mesh through the gradsync Store, then learns each peer's address as
  // Gloo's messages will print it.
  void join() {
    // Gloo's event loop starts in CreateDevice and keeps this thread's mask: SIGPIPE blocked.
    const SigpipeBlocked no_sigpipe;
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = options_.bind_host;
      attr.ai_family = AF_INET;  // the address TcpRing binds too, never an IPv6 alternative
      device_ = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw Error(me_ + ": gloo cannot open a TCP device on bind_host '" + options_.bind_host +
                  "': " + without_source_prefix(e.what()));
    }
    auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    // Every pair gets this timeout for each of its waits; collectives get it again below.
    context->setTimeout(options_.timeout);
    GlooStore rendezvous(store_, options_.store_prefix, options_.timeout);
    try {
      context->connectFullMesh(rendezvous, device_);
    } catch (const Error&) {
      throw;  // the gradsync Store's own error: a TimeoutError names the missing keys
    } catch (const std::exception& e) {
      const std::string gloo = without_source_prefix(e.what());
      const std::string what =
          "gloo rendezvous (connecting the full mesh of " + std::to_string(size_) + " ranks)";
      if (contains(gloo, "timeout") || contains(gloo, "Timed out")) {
        throw TimeoutError(rank_, options_.bind_host, what, gloo);
      }
      throw PeerError(rank_, options_.bind_host, what, gloo);
    }
    context_ = std::move(context);
    // Rank r published the addresses of its pairs under "<prefix>/<r>", one per other rank in
    // rank order without itself; ours is at our rank, less one if we come after r: the address
    // r listened on for us, which our errors give as its endpoint.
    peers_.resize(std::size_t(size_));
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const std::string all = store_.get(rendezvous.full_key(std::to_string(r)), options_.timeout);
      const std::size_t width = all.size() / std::size_t(size_ - 1);
      const std::size_t slot = std::size_t(rank_ > r ? rank_ - 1 : rank_);
      const gloo::transport::tcp::Address address(
          std::vector<char>(all.begin() + slot * width, all.begin() + (slot + 1) * width));
      peers_[std::size_t(r)].endpoint = endpoint_of(address);
      peers_[std::size_t(r)].gloo_names.push_back(address.str());
    }
    // Gloo's messages may name the far end of a connection by the address it connected from,
    // which only that end knows (an ephemeral port): each rank publishes the local address of
    // each of its connections, one line per rank, for its peers to read if they fail.
    std::string names;
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) names += context_->getPair(r)->address().str();
      names += '\n';
    }
    store_.set(names_key(rank_), names);
  }

  std::string names_key(int rank) const {
    return options_.store_prefix + "/addresses/" + std::to_string(rank);
  }

  // How Gloo's messages here may name `peer` (Peer::gloo_names): the address it connected
  // from is read, once, from what it published at joining, when a failure first needs it.
  const std::vector<std::string>& gloo_names(int peer) {
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
          p.gloo_names.push_back(lines.substr(begin, lines.find('\n', begin) - begin));
        }
      } catch (const std::exception&) {
        // The listening address alone, then.
      }
    }
    return p.gloo_names;
  }

  void reduce_sum(std::span<float> data, std::uint32_t tag) {
    std::vector<float*> pointers = {data.data()};
    switch (algorithm_) {
      case Algorithm::kRing: {
        // In place: without an input buffer, Gloo reduces the output buffer itself.
        gloo::AllreduceOptions opts(context_);
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        opts.setOutput(data.data(), data.size());
        opts.setReduceFunction(sum_floats);
        opts.setTag(tag);
        opts.setTimeout(options_.timeout);
        gloo::allreduce(opts);
        return;
      }
      // The older algorithm classes match their peers by the context's slot counter, which
      // every rank advances alike because every rank constructs the same algorithms in the
      // same order (no-ops construct none). Their waits use the pairs' timeout, set at joining.
      case Algorithm::kRingChunked: {
        gloo::AllreduceRingChunked<float> ring(context_, pointers, int(data.size()));
        ring.run();
        return;
      }
      case Algorithm::kHalvingDoubling: {
        gloo::AllreduceHalvingDoubling<float> halving_doubling(context_, pointers,
                                                               int(data.size()));
        halving_doubling.run();
        return;
      }
    }
  }

  // The first half of a ring allreduce over the N blocks of `sums`, in place. Step k = 1..N-1
  // sends block (r - k) to rank r + 1 and receives block (r - k - 1) from rank r - 1 into a
  // scratch block, then adds it into ours: what arrives at step k leaves at step k+1, and the
  // last step completes block r - N = r, the sum over every rank. TcpRing's reduce-scatter runs
  // this schedule and adds in the same order (received into ours), so the two agree bit for bit.
  // Every step waits for its send to leave before the next: an unbound buffer takes one operation
  // at a time, and a block is written only after the step that sent it.
  void ring_reduce_scatter(std::span<float> sums, std::size_t block, std::uint32_t tag) {
    const int left = (rank_ + size_ - 1) % size_;
    const int right = (rank_ + 1) % size_;
    const std::uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);
    const std::size_t bytes = block * sizeof(float);
    std::vector<float> scratch(block);
    auto from = context_->createUnboundBuffer(sums.data(), sums.size_bytes());
    auto into = context_->createUnboundBuffer(scratch.data(), bytes);
    const auto at = [&](int k) { return std::size_t((rank_ - k + 2 * size_) % size_) * block; };
    for (int k = 1; k < size_; ++k) {
      from->send(right, slot, at(k) * sizeof(float), bytes);  // block r - k
      into->recv(left, slot, 0, bytes);
      wait_for(left, [&] { return into->waitRecv(options_.timeout); });
      float* dst = sums.data() + at(k + 1);  // block r - k - 1
      for (std::size_t i = 0; i < block; ++i) dst[i] += scratch[i];
      wait_for(right, [&] { return from->waitSend(options_.timeout); });
    }
  }

  // A wait of ring_reduce_scatter on `peer`: its timeout says whom it waited for. (Gloo's
  // other failures, a closed connection, name the peer's address themselves.)
  template <typename Wait>
  void wait_for(int peer, Wait wait) {
    bool done = false;
    try {
      done = wait();
    } catch (const std::exception& e) {
      if (!contains(e.what(), "Timed out")) throw;
      throw PeerWaitTimeout(e.what(), peer);
    }
    if (!done) throw std::runtime_error("gloo: a wait of the reduce-scatter ring was aborted");
  }

  // Queues `body` (given the collective's tag) as the next collective. A collective that does
  // not run (world size 1, zero elements) still takes its turn, so that it completes in issue
  // order and fails like any other call after a failure.
  template <typename Body>
  std::shared_ptr<Work> issue(const std::string& description, bool runs, std::uint64_t sent,
                              std::uint64_t received, Body body) {
    return queue_.submit(description,
                         [this, runs, sent, received, body = std::move(body)](tcp::RingWork& work) {
                           throw_if_closed(work);
                           block_sigpipe_on_this_thread();  // Gloo writes from here too
                           if (runs) {
                             try {
                               body(tag_of(work.what()));
                             } catch (const std::exception& e) {
                               fail(work, e);
                             }
                             bytes_sent_ += sent;
                             bytes_received_ += received;
                           }
                           ++collectives_;
                         });
  }

  // Runs on the queue's thread: what was queued before an abort or the destructor fails here.
  void throw_if_closed(const tcp::RingWork& work) {
    if (aborted_) throw Error(me_ + ": " + work.what() + ": this rank aborted: " + abort_reason());
    if (closing_) {
      throw Error(me_ + ": " + work.what() + " never ran: the communicator was destroyed");
    }
  }

  std::string abort_reason() {
    std::lock_guard lock(abort_mutex_);
    return abort_reason_;
  }

  // The peer a Gloo message names by address, or -1. The listening addresses (known here)
  // are tried first, the addresses peers connected from (read from the Store) after them.
  int peer_named_in(const std::string& message) {
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

  // "[127.0.0.1]:4100" is no match for "[127.0.0.1]:41007".
  static bool names_address(const std::string& message, const std::string& name) {
    if (name.empty()) return false;
    for (auto at = message.find(name); at != std::string::npos; at = message.find(name, at + 1)) {
      const std::size_t end = at + name.size();
      if (end == message.size() || !std::isdigit(static_cast<unsigned char>(message[end]))) {
        return true;
      }
    }
    return false;
  }

  // What `peer` published when its collective failed (kind, first failure), waiting up to the
  // grace period: a peer publishes before it closes its connections, except when Gloo closed
  // them itself on a timeout a moment before.
  std::optional<std::pair<std::string, std::string>> peer_report(int peer) {
    std::string value;
    try {
      value = store_.get(failure_key(peer), grace_);
    } catch (const std::exception&) {
      return std::nullopt;
    }
    const auto newline = value.find('\n');
    if (newline == std::string::npos) return std::make_pair(std::string("error"), value);
    return std::make_pair(value.substr(0, newline), value.substr(newline + 1));
  }

  std::string failure_key(int rank) const {
    return options_.store_prefix + "/failed/" + std::to_string(rank);
  }

  // Once per rank: kind is "timeout", "abort" or "error"; `first` says where the failure
  // started, for the peers that read end-of-file from us next.
  void publish_failure(const std::string& kind, const std::string& first) {
    if (published_.exchange(true)) return;
    try {
      store_.set(failure_key(rank_), kind + "\n" + first);
    } catch (const std::exception&) {
      // No Store (rank 0's server gone): the peers say "reported no failure" instead.
    }
  }

  // Fails whatever is pending on every pair (the waits here wake with Gloo's "Application
  // timeout caused pair closure") and closes the sockets, so that every peer reads end-of-file
  // and fails at once. Gloo does exactly that when one of its receives times out; its direct
  // handle (tcp::Pair::signalExceptionExternal) is protected, and Debian's headers for the tcp
  // pair do not compile (gloo/common/memory.h is not packaged). So this posts a receive nobody
  // will send to, on the first pair still open, and lets its wait time out at once. Never
  // waits on a peer; idempotent; from any thread (pairs and context take their own locks).
  void close_connections() {
    if (!context_) return;
    std::lock_guard lock(close_mutex_);
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
        buffer->waitRecv(nullptr, milliseconds(0));
      } catch (const std::exception&) {
        // The timeout it was meant to have: every pair of the context is closed now.
      }
      return;
    }
  }

  [[noreturn]] void fail(tcp::RingWork& work, const std::exception& failure);

  Store& store_;
  const int rank_;
  const int size_;
  const GlooOptions options_;
  const Algorithm algorithm_;
  const milliseconds grace_;  // how long a failing rank waits for a peer's report
  const std::string me_;      // "rank 3", for messages
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;  // after device_: the pairs close before the loop
  std::vector<Peer> peers_;                 // by rank; empty for ourselves; queue thread only
  std::atomic<bool> closing_{false};
  std::atomic<bool> aborted_{false};
  std::atomic<bool> published_{false};
  std::mutex abort_mutex_;
  std::mutex close_mutex_;
  std::string abort_reason_;
  std::atomic<std::uint64_t> bytes_sent_{0}, bytes_received_{0}, collectives_{0};
  tcp::WorkQueue queue_;  // last: its thread stops before the members above go
};

// Turns Gloo's exception into the gradsync error every later call will see too, publishes where
// the failure started, and closes the connections so that the peers fail now rather than at
// their deadline.
void GlooCommunicator::fail(tcp::RingWork& work, const std::exception& failure) {
  const std::string operation = work.what();
  if (aborted_) throw Error(me_ + ": " + operation + ": this rank aborted: " + abort_reason());
  if (closing_) {
    throw Error(me_ + ": " + operation + " interrupted: the communicator was destroyed");
  }
  const std::string gloo = without_source_prefix(failure.what());
  const auto* ring_wait = dynamic_cast<const PeerWaitTimeout*>(&failure);
  const int peer = ring_wait != nullptr ? ring_wait->peer : peer_named_in(gloo);
  const std::string them = peer >= 0 ? "rank " + std::to_string(peer) : "";
  const std::string endpoint = peer >= 0 ? peers_[std::size_t(peer)].endpoint : "";
  const auto timeout_error = [&](const std::string& problem) {
    return peer_error<TimeoutError>(peer, endpoint, operation, problem);
  };
  const auto peer_failure = [&](const std::string& problem) {
    return peer_error<PeerError>(peer, endpoint, operation, problem);
  };
  std::string kind = "error";
  std::string first;
  std::exception_ptr thrown;
  if (contains(gloo, "Timed out") || contains(gloo, "timeout")) {
    kind = "timeout";
    first = me_ + " timed out after " + std::to_string(options_.timeout.count()) +
            " ms waiting for " + (peer >= 0 ? them : "a peer") + " in " + operation;
    thrown = timeout_error(me_ + " timed out after " + std::to_string(options_.timeout.count()) +
                           " ms (" + gloo + ")");
  } else if (peer >= 0) {
    // Closed, reset, or a read error: the peer failed or left. Its report says why, and
    // whether it timed out first, which makes ours a timeout too.
    work.mark_failing();
    const auto report = peer_report(peer);
    if (report) {
      kind = report->first == "timeout" ? "timeout" : "error";
      first = report->second;
      const std::string problem = them + " closed the connection after " +
                                  (kind == "timeout" ? "a timeout: " : "a failure: ") + first;
      thrown = kind == "timeout" ? timeout_error(problem) : peer_failure(problem);
    } else {
      first = them + " closed the connection to " + me_ + " in " + operation;
      thrown = peer_failure(them + " closed the connection (" + gloo +
                            ") and reported no failure within " + seconds_text(grace_) +
                            ": did its process die?");
    }
  } else {
    first = me_ + " in " + operation + ": gloo: " + gloo;
    thrown = peer_failure("gloo: " + gloo);
  }
  publish_failure(kind, first);
  close_connections();
  std::rethrow_exception(thrown);
}

}  // namespace

const std::vector<std::string>& gloo_algorithms() {
  // All three are in Debian's snapshot (0.0~git20220518): gloo::allreduce with RING, and the
  // AllreduceRingChunked and AllreduceHalvingDoubling class templates.
  static const std::vector<std::string> names = {"ring", "ring_chunked", "halving_doubling"};
  return names;
}

std::string gloo_version() {
  return std::to_string(GLOO_VERSION_MAJOR) + "." + std::to_string(GLOO_VERSION_MINOR) + "." +
         std::to_string(GLOO_VERSION_PATCH);
}

std::unique_ptr<Communicator> make_gloo_communicator(Store& store, int rank, int size,
                                                     const GlooOptions& options) {
  GRADSYNC_CHECK(size >= 1 && rank >= 0 && rank < size,
                 "make_gloo_communicator: rank outside [0, size)");
  const auto& names = gloo_algorithms();
  const auto found = std::find(names.begin(), names.end(), options.algorithm);
  if (found == names.end()) {
    std::string valid;
    for (const auto& name : names) valid += (valid.empty() ? "" : ", ") + name;
    throw ConfigError(
        "comm", "comm.algorithm",
        "unknown algorithm '" + options.algorithm + "' (valid for gloo: " + valid + ")");
  }
  const Algorithm algorithm = kAlgorithms[found - names.begin()];
  return std::make_unique<GlooCommunicator>(store, rank, size, options, algorithm);
}

}  // namespace gradsync
