// Compiled only when libgloo-dev is found (see gloo_ring.h).
#include "bench/gloo_ring.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/socket.h>

#include <cstdint>
#include <memory>

#include "allreduce/gloo/gloo_communicator.h"  // gloo_version(), the one gradsync links
#include "common/error.h"

namespace gradsync {
namespace {

constexpr const char* kHost = "127.0.0.1";

using GlooRun = void (*)(const std::shared_ptr<gloo::Context>& context, std::uint32_t tag,
                         std::chrono::milliseconds timeout, RankBuffers& buffers);

// gloo::sum<float> has overloads; this picks the (out, a, b, n) one that AllreduceOptions wants.
void sum_floats(void* out, const void* a, const void* b, std::size_t n) {
  gloo::sum<float>(out, a, b, n);
}

// In place on `out`, like TcpRing: without setInput, Gloo reduces the output buffer itself.
void run_allreduce(const std::shared_ptr<gloo::Context>& context, std::uint32_t tag,
                   std::chrono::milliseconds timeout, RankBuffers& b) {
  gloo::AllreduceOptions opts(context);
  opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  opts.setOutput(b.out.data(), b.out.size());
  opts.setReduceFunction(sum_floats);
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
}

// In place from root 0: with no input, the root sends from its output buffer.
void run_broadcast(const std::shared_ptr<gloo::Context>& context, std::uint32_t tag,
                   std::chrono::milliseconds timeout, RankBuffers& b) {
  gloo::BroadcastOptions opts(context);
  opts.setOutput(b.out.data(), b.out.size());
  opts.setRoot(0);
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::broadcast(opts);
}

void run_allgather(const std::shared_ptr<gloo::Context>& context, std::uint32_t tag,
                   std::chrono::milliseconds timeout, RankBuffers& b) {
  gloo::AllgatherOptions opts(context);
  opts.setInput(b.in.data(), b.in.size());
  opts.setOutput(b.out.data(), b.out.size());
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allgather(opts);
}

struct GlooOp {
  const char* name;
  GlooRun run;
  const char* algorithm;
};

constexpr GlooOp kGlooOps[] = {
    {"allreduce", run_allreduce, "gloo::allreduce ring (reduce-scatter + all-gather)"},
    {"broadcast", run_broadcast, "gloo::broadcast binomial tree from root 0"},
    {"allgather", run_allgather, "gloo::allgather ring"},
};

const GlooOp* find_gloo_op(const std::string& name) {
  for (const GlooOp& op : kGlooOps) {
    if (name == op.name) return &op;
  }
  return nullptr;
}

class GlooRank final : public BenchRank {
 public:
  GlooRank(const GlooOp& op, gloo::rendezvous::Store& store, int rank, int size,
           std::chrono::milliseconds timeout)
      : op_(op), rank_(rank), timeout_(timeout) {
    guarded("connect", [&] {
      gloo::transport::tcp::attr attr;
      attr.hostname = kHost;
      attr.ai_family = AF_INET;  // the address TcpRing uses too, never an IPv6 alternative
      device_ = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
      context->setTimeout(timeout);
      context->connectFullMesh(store, device_);
      context_ = std::move(context);
    });
  }

  void barrier() override {
    guarded("barrier", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(next_tag_++);
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

  void run(RankBuffers& buffers) override {
    guarded(op_.name, [&] { op_.run(context_, next_tag_++, timeout_, buffers); });
  }

 private:
  // Gloo throws its own exception types; gradsync's callers expect PeerError (a timeout is
  // reported by Gloo as an IoException whose text says "Timed out").
  template <typename F>
  void guarded(const std::string& what, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {  // gloo::Exception, and EnforceNotMet from GLOO_ENFORCE
      throw PeerError(rank_, kHost, "gloo " + what, e.what());
    }
  }

  const GlooOp& op_;
  int rank_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  // Every rank issues the same sequence of calls, so the counters agree without talking.
  std::uint32_t next_tag_ = 1;
};

}  // namespace

std::string gloo_algorithm(const std::string& op) {
  const GlooOp* gloo_op = find_gloo_op(op);
  return gloo_op != nullptr ? gloo_op->algorithm : "none";
}

std::optional<std::vector<SizeResult>> gloo_measure(const SweepSpec& spec) {
  const GlooOp* op = find_gloo_op(spec.op->name);
  if (op == nullptr || spec.ranks < 2) return std::nullopt;
  // The store outlives every context connected through it: measure_sweep joins its threads.
  gloo::rendezvous::HashStore store;
  return measure_sweep(spec, [&](int rank) -> std::unique_ptr<BenchRank> {
    return std::make_unique<GlooRank>(*op, store, rank, spec.ranks, spec.timeout);
  });
}

}  // namespace gradsync
