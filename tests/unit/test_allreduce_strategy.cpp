#include <doctest/doctest.h>

#include <thread>

#include "allreduce/in_memory_store.h"
#include "allreduce/make_communicator.h"
#include "allreduce/tcp/tcp_ring.h"
#include "common/compression/top_k_codec.h"
#include "model/mlp.h"
#include "model/sampler.h"
#include "model/synthetic_data.h"
#include "strategies/allreduce/allreduce_strategy.h"
#include "tests/support/compare.h"
#include "tests/support/digesting_strategy.h"
#include "tests/support/training.h"
#include "worker/in_process.h"
#include "worker/worker_loop.h"

namespace {

using gradsync::LoopResult;
using gradsync::testing::DigestingStrategy;

const gradsync::TrainTest& data() { return gradsync::testing::synthetic_data(); }

const std::vector<int> kWidths = {32, 64, 32, 10};

struct RankRun {
  int batch = 16;
  int accumulation = 1;
  std::size_t bucket_bytes = 25u << 20;
  bool overlap = true;
  bool join_uneven = false;
  std::vector<std::int64_t> steps_per_rank;  // empty: every rank takes `steps`
  std::string backend = "tcp";               // comm.backend: the communicator under the strategy
  std::string algorithm = "default";
  std::string gloo_pairs = "async";
  std::string hierarchical = "auto";  // comm.hierarchical
  int ranks_per_host = 0;             // > 0: ranks grouped into hosts of this many (host ids)
  std::vector<std::string>* backends = nullptr;  // when set: each rank's Communicator::backend()
  gradsync::CompressionOptions compression;      // its tensors: the model's
  // When set, each rank records a digest of its parameters after every step: [rank][step].
  std::vector<std::vector<std::uint64_t>>* digests = nullptr;
};

// N ranks as N threads, each with its own model, sampler and TcpRing over loopback: the same
// code path as `gradsync worker`, minus the processes.
std::vector<LoopResult> train_ring(
    int ranks, const RankRun& run, std::int64_t steps,
    std::vector<std::vector<std::pair<std::size_t, std::size_t>>>* buckets = nullptr,
    std::vector<std::string>* errors_out = nullptr) {
  gradsync::InMemoryStore store;
  std::vector<LoopResult> results(static_cast<std::size_t>(ranks));
  std::vector<std::string> errors(static_cast<std::size_t>(ranks));
  if (buckets) buckets->assign(static_cast<std::size_t>(ranks), {});
  if (run.digests) run.digests->assign(static_cast<std::size_t>(ranks), {});
  if (run.backends) run.backends->assign(static_cast<std::size_t>(ranks), {});
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        try {
          gradsync::CommunicatorOptions communicator;
          communicator.backend = run.backend;
          communicator.algorithm = run.algorithm;
          communicator.gloo_pairs = run.gloo_pairs;
          communicator.hierarchical = run.hierarchical;
          communicator.shm_on_one_host = true;
          if (run.ranks_per_host > 0) {
            communicator.host_id = "host " + std::to_string(r / run.ranks_per_host);
          }
          communicator.tcp.timeout = std::chrono::milliseconds(errors_out ? 2000 : 20000);
          std::shared_ptr<gradsync::Communicator> comm =
              gradsync::make_communicator(store, r, ranks, communicator);
          if (run.backends) (*run.backends)[r] = comm->backend();
          gradsync::AllreduceStrategyOptions options;
          options.bucket_bytes = run.bucket_bytes;
          options.overlap = run.overlap;
          options.join_uneven = run.join_uneven;
          options.sgd = {0.05, 0.9, 1e-4};
          gradsync::Mlp model(kWidths, run.batch);
          options.compression = run.compression;
          options.compression.tensors = model.tensors();
          gradsync::AllreduceStrategy strategy(comm, options);
          // Different initial weights per rank: init's broadcast must make them equal.
          model.init_params(1 + static_cast<std::uint64_t>(r) * 100);
          gradsync::DistributedSampler sampler(data().train.size, r, ranks, run.batch, 1);
          gradsync::LoopOptions loop;
          loop.steps = run.steps_per_rank.empty() ? steps : run.steps_per_rank[r];
          loop.accumulation_steps = run.accumulation;
          loop.keep_params = true;
          if (run.digests) {
            DigestingStrategy digesting(strategy, (*run.digests)[r]);
            results[r] = gradsync::run_worker_loop(model, digesting, sampler, data(), loop, {});
          } else {
            results[r] = gradsync::run_worker_loop(model, strategy, sampler, data(), loop, {});
          }
          if (buckets) (*buckets)[r] = strategy.last_buckets();
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
  }
  if (errors_out) {
    *errors_out = errors;
    return results;
  }
  for (int r = 0; r < ranks; ++r)
    REQUIRE_MESSAGE(errors[r].empty(), "rank " << r << ": " << errors[r]);
  return results;
}

std::vector<float> train_single(int batch, std::int64_t steps) {
  return gradsync::testing::train_single({64, 32}, batch, steps,
                                         gradsync::SgdOptions{0.05, 0.9, 1e-4});
}

const std::vector<gradsync::LayerRange>& layers() {
  static const gradsync::Mlp model(kWidths, 1);
  return model.layers();
}

}  // namespace

TEST_CASE("allreduce strategy: N ranks follow `single` on the global batch for 50 steps") {
  for (int ranks : {2, 3, 4}) {
    CAPTURE(ranks);
    // Small buckets: several reductions in flight during backward.
    RankRun run;
    run.bucket_bytes = 4096;
    const auto results = train_ring(ranks, run, 50);
    for (const auto& r : results) CHECK(r.final_params == results.front().final_params);
    const auto single = train_single(16 * ranks, 50);
    const double diff =
        gradsync::testing::max_relative_difference(results.front().final_params, single, layers());
    MESSAGE("allreduce with " << ranks << " ranks vs single: max relative difference " << diff);
    CHECK(diff <= 1e-5);
    // The ring's cost, per step: 2(N-1)/N of the gradient's bytes from every rank, up to the
    // rounding of a bucket into N segments (N = 3 here: 1206000 B for 1205867).
    const double gradient_bytes = 4.0 * static_cast<double>(results.front().final_params.size());
    const double expected = 50 * 2.0 * (ranks - 1) / ranks * gradient_bytes;
    CHECK(static_cast<double>(results.front().totals.bytes_sent) ==
          doctest::Approx(expected).epsilon(1e-3));
  }
}

TEST_CASE("allreduce strategy: every backend follows `single`, ranks bitwise equal every step") {
  // (backend, comm.algorithm, comm.gloo_pairs)
  std::vector<std::tuple<std::string, std::string, std::string>> backends = {
      {"tcp", "default", "async"}, {"shm", "default", "async"}};
  for (const std::string& name : gradsync::compiled_backends()) {
    if (name == "gloo") {
      for (const char* algorithm : {"ring", "ring_chunked", "halving_doubling"}) {
        backends.emplace_back(name, algorithm, "async");
      }
      backends.emplace_back(name, "halving_doubling", "sync");
    }
  }
  for (const auto& [backend, algorithm, pairs] : backends) {
    for (int ranks : {2, 4}) {
      CAPTURE(backend);
      CAPTURE(algorithm);
      CAPTURE(pairs);
      CAPTURE(ranks);
      std::vector<std::vector<std::uint64_t>> digests;
      RankRun run;
      run.bucket_bytes = 4096;
      run.backend = backend;
      run.algorithm = algorithm;
      run.gloo_pairs = pairs;
      run.digests = &digests;
      const auto results = train_ring(ranks, run, 50);
      REQUIRE(digests.front().size() == 50);
      for (int r = 1; r < ranks; ++r) CHECK(digests[r] == digests.front());
      const double diff = gradsync::testing::max_relative_difference(
          results.front().final_params, train_single(16 * ranks, 50), layers());
      MESSAGE(backend << "/" << algorithm << "/" << pairs << " with " << ranks
                      << " ranks vs single: max relative difference " << diff);
      CHECK(diff <= 1e-5);
    }
  }
}

TEST_CASE("allreduce strategy: hierarchical over hosts of 2 ranks follows `single`") {
  for (int ranks : {4, 5}) {
    CAPTURE(ranks);
    std::vector<std::vector<std::uint64_t>> digests;
    std::vector<std::string> backends;
    RankRun run;
    run.backends = &backends;
    run.bucket_bytes = 4096;
    run.backend = "auto";
    run.ranks_per_host = 2;  // auto goes hierarchical: several hosts, several ranks on one
    run.digests = &digests;
    const auto results = train_ring(ranks, run, 50);
    for (int r = 1; r < ranks; ++r) CHECK(digests[r] == digests.front());
    CHECK(backends.front() == "shm+tcp");
    // Rank 4 of 5 is host 2's only rank, so its leader; rank 3 of 4 is not.
    CHECK(backends.back() == (ranks == 5 ? "shm+tcp" : "shm+leaders"));
    const double diff = gradsync::testing::max_relative_difference(
        results.front().final_params, train_single(16 * ranks, 50), layers());
    MESSAGE("hierarchical with " << ranks << " ranks vs single: max relative difference " << diff);
    CHECK(diff <= 1e-5);
  }
}

TEST_CASE("allreduce strategy: PowerSGD at full rank is the uncompressed average") {
  // The layers' matrices are 32x64, 64x32 and 32x10: rank 64 is clamped to each one's full
  // rank, where P Q^T is the average gradient itself, and the residual stays zero.
  RankRun plain;
  plain.bucket_bytes = 4096;
  RankRun full = plain;
  full.compression.method = "powersgd";
  full.compression.powersgd_rank = 64;
  full.compression.seed = 7;
  const auto a = train_ring(2, plain, 30);
  const auto b = train_ring(2, full, 30);
  const double diff = gradsync::testing::max_relative_difference(a.front().final_params,
                                                                 b.front().final_params, layers());
  MESSAGE("powersgd at full rank vs none after 30 steps: max relative difference " << diff);
  CHECK(diff <= 1e-5);
}

TEST_CASE("allreduce strategy: PowerSGD keeps ranks bitwise equal and moves (n + m) r a matrix") {
  for (int ranks : {2, 3}) {
    CAPTURE(ranks);
    std::vector<std::vector<std::uint64_t>> digests;
    RankRun run;
    run.bucket_bytes = 4096;
    run.compression.method = "powersgd";
    run.compression.powersgd_rank = 2;
    run.compression.start_step = 5;  // 5 uncompressed steps first
    run.digests = &digests;
    const auto results = train_ring(ranks, run, 20);
    for (int r = 1; r < ranks; ++r) CHECK(digests[r] == digests.front());
    std::vector<std::vector<std::uint64_t>> plain_digests;
    RankRun plain;
    plain.bucket_bytes = 4096;
    plain.digests = &plain_digests;
    train_ring(ranks, plain, 6);
    // The warm-up steps are the uncompressed ones, bit for bit; the first compressed one is not.
    CHECK(std::equal(plain_digests.front().begin(), plain_digests.front().begin() + 5,
                     digests.front().begin()));
    CHECK(plain_digests.front()[5] != digests.front()[5]);
    // Per compressed step: P and Q of the three matrices at rank 2, the 106 bias floats plain,
    // each all-reduced by the ring at 2(N-1)/N of its bytes (up to segment rounding).
    const double floats = (32 + 64) * 2 + (64 + 32) * 2 + (32 + 10) * 2 + (64 + 32 + 10);
    const double plain_floats = 32 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10;
    const double per = 2.0 * (ranks - 1) / ranks * 4;
    const double expected = 15 * per * floats + 5 * per * plain_floats;
    CHECK(static_cast<double>(results.front().totals.bytes_sent) ==
          doctest::Approx(expected).epsilon(0.02));
  }
}

TEST_CASE("allreduce strategy: fp16, bf16 and topk keep ranks bitwise equal, near none") {
  RankRun plain;
  plain.bucket_bytes = 4096;
  const auto reference = train_ring(4, plain, 30);
  // (method, max relative difference to none after 30 steps): 16-bit rounding of each step's
  // average; top-k at ratio 1 sends everything, summed in another order.
  const std::vector<std::tuple<std::string, double, double>> methods = {
      {"fp16", 1.0, 2e-2}, {"bf16", 1.0, 1e-1}, {"topk", 1.0, 1e-6}};
  for (const auto& [method, ratio, bound] : methods) {
    CAPTURE(method);
    std::vector<std::vector<std::uint64_t>> digests;
    RankRun run = plain;
    run.compression.method = method;
    run.compression.topk_ratio = ratio;
    run.digests = &digests;
    const auto results = train_ring(4, run, 30);
    for (int r = 1; r < 4; ++r) CHECK(digests[r] == digests.front());
    const double diff = gradsync::testing::max_relative_difference(
        results.front().final_params, reference.front().final_params, layers());
    MESSAGE(method << " vs none after 30 steps: max relative difference " << diff);
    CHECK(diff <= bound);
    CHECK(diff > 0);
  }
}

TEST_CASE("allreduce strategy: compressed bytes on the wire, counted exactly") {
  const double params = 32 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10;  // 4522 floats
  RankRun run;
  run.bucket_bytes = 4096;
  const auto plain = train_ring(4, run, 10);
  run.compression.method = "fp16";
  const auto half = train_ring(4, run, 10);
  // 16 bits a value: half the ring's bytes, up to the segments' rounding.
  CHECK(static_cast<double>(half.front().totals.bytes_sent) ==
        doctest::Approx(plain.front().totals.bytes_sent / 2.0).epsilon(0.01));
  CHECK(static_cast<double>(plain.front().totals.bytes_sent) ==
        doctest::Approx(10 * 1.5 * 4 * params).epsilon(0.01));
  // top-k 1%: every bucket's k = ceil(n / 100) (index, value) pairs gathered from 4 ranks: each
  // rank sends the 3 others' pairs around the ring, 3 x 8 k bytes a bucket.
  run.compression.method = "topk";
  run.compression.topk_ratio = 0.01;
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> buckets;
  const auto sparse = train_ring(4, run, 10, &buckets);
  std::uint64_t per_step = 0;
  for (const auto& [begin, end] : buckets.front()) {
    per_step += 3 * 8 * gradsync::compression::TopKCodec::k_for(end - begin, 0.01);
  }
  CHECK(sparse.front().totals.bytes_sent == 10 * per_step);
}

TEST_CASE("allreduce strategy: accumulating k micro-batches equals one step on k times the batch") {
  RankRun micro;
  micro.batch = 8;
  micro.accumulation = 4;
  RankRun whole;
  whole.batch = 32;
  const auto accumulated = train_ring(2, micro, 20);
  const auto reference = train_ring(2, whole, 20);
  const double diff = gradsync::testing::max_relative_difference(
      accumulated.front().final_params, reference.front().final_params, layers());
  MESSAGE("k=4 micro-batches of 8 vs batch 32: max relative difference " << diff);
  CHECK(diff <= 1e-5);
  // No communication between micro-batches: the same bytes per optimizer step either way.
  CHECK(accumulated.front().totals.bytes_sent == reference.front().totals.bytes_sent);
}

TEST_CASE("allreduce strategy: buckets hold whole layers, last layer first, about bucket_bytes") {
  RankRun run;
  // Layer sizes in floats: 32*64+64 = 2112, 64*32+32 = 2080, 32*10+10 = 330.
  run.bucket_bytes = 2080 * sizeof(float);
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> buckets;
  const auto results = train_ring(2, run, 2, &buckets);
  const auto& l = layers();
  // The last two layers reach the cap together; the first layer is a bucket of its own.
  const std::vector<std::pair<std::size_t, std::size_t>> expected = {
      {l[1].weight_offset, l[2].end()}, {l[0].weight_offset, l[0].end()}};
  CHECK(buckets[0] == expected);
  CHECK(buckets[1] == expected);
  // Each step's stats count its two bucket reductions, the B of the cost model's latency term
  // (a size-only estimate, ceil(4522 / 2080) = 3, would be wrong).
  for (const auto& r : results) CHECK(r.totals.collectives == 2 * 2);
}

TEST_CASE("allreduce strategy: without overlap the same buckets give the same parameters") {
  RankRun overlapped;
  overlapped.bucket_bytes = 4096;
  RankRun after = overlapped;
  after.overlap = false;
  const auto a = train_ring(2, overlapped, 10);
  const auto b = train_ring(2, after, 10);
  CHECK(a.front().final_params == b.front().final_params);
}

TEST_CASE("allreduce strategy: with join, ranks with fewer batches serve the others until done") {
  RankRun run;
  run.bucket_bytes = 4096;
  run.join_uneven = true;
  run.steps_per_rank = {10, 14, 12};
  const auto uneven = train_ring(3, run, 0);
  // Every rank ends with the parameters of the rank that trained longest.
  CHECK(uneven[0].final_params == uneven[1].final_params);
  CHECK(uneven[2].final_params == uneven[1].final_params);
  // And those went further than the 10 steps all ranks shared.
  run.steps_per_rank = {10, 10, 10};
  const auto even = train_ring(3, run, 0);
  CHECK(gradsync::testing::max_relative_difference(uneven[0].final_params, even[0].final_params,
                                                   layers()) > 1e-4);
}

TEST_CASE("allreduce strategy: with join and even inputs, training equals the plain strategy") {
  RankRun joined;
  joined.bucket_bytes = 4096;
  joined.join_uneven = true;
  RankRun plain = joined;
  plain.join_uneven = false;
  const auto a = train_ring(2, joined, 10);
  const auto b = train_ring(2, plain, 10);
  CHECK(gradsync::testing::max_relative_difference(a[0].final_params, b[0].final_params,
                                                   layers()) <= 1e-6);
}

TEST_CASE("allreduce strategy: without join, a rank that runs out ends the others, never hangs") {
  RankRun run;
  run.steps_per_rank = {5, 8};
  std::vector<std::string> errors;
  train_ring(2, run, 0, nullptr, &errors);
  CHECK(errors[0].empty());
  MESSAGE("rank 1: " << errors[1]);
  CHECK(errors[1].find("rank 0") != std::string::npos);
}

namespace {

// A one-rank communicator that records when collectives are issued, to see overlap happen.
class RecordingCommunicator final : public gradsync::Communicator {
 public:
  struct Done final : gradsync::Work {
    void wait(std::chrono::milliseconds) override {}
    bool completed() const override { return true; }
  };
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(1000); }
  std::shared_ptr<gradsync::Work> allreduce_async(std::span<float> data,
                                                  gradsync::ReduceOp) override {
    issued.push_back(data.size());
    return std::make_shared<Done>();
  }
  std::shared_ptr<gradsync::Work> allreduce_into_async(std::span<const float> in,
                                                       std::span<float> out,
                                                       gradsync::ReduceOp) override {
    std::copy(in.begin(), in.end(), out.begin());  // one rank: the sum is its own values
    issued.push_back(out.size());
    return std::make_shared<Done>();
  }
  std::shared_ptr<gradsync::Work> broadcast_async(std::span<float>, int) override {
    return std::make_shared<Done>();
  }
  std::shared_ptr<gradsync::Work> allgather_async(std::span<const float>,
                                                  std::span<float>) override {
    return std::make_shared<Done>();
  }
  std::shared_ptr<gradsync::Work> reduce_scatter_async(std::span<const float>, std::span<float>,
                                                       gradsync::ReduceOp) override {
    return std::make_shared<Done>();
  }
  std::shared_ptr<gradsync::Work> barrier_async() override { return std::make_shared<Done>(); }
  gradsync::CommCounters counters() const override { return {}; }
  std::string backend() const override { return "test"; }
  void abort(const std::string& reason) override { aborted = reason; }
  std::vector<std::size_t> issued;
  std::string aborted;
};

}  // namespace

TEST_CASE("allreduce strategy: with overlap, buckets are issued during backward, not after") {
  for (bool overlap : {true, false}) {
    CAPTURE(overlap);
    auto comm = std::make_shared<RecordingCommunicator>();
    gradsync::AllreduceStrategyOptions options;
    options.bucket_bytes = 1;  // every layer closes a bucket
    options.overlap = overlap;
    gradsync::AllreduceStrategy strategy(comm, options);
    gradsync::Mlp model(kWidths, 4);
    strategy.init(model.params());
    const std::int64_t batch[] = {0, 1, 2, 3};
    std::vector<std::size_t> issued_during_backward;
    model.set_grad_ready_callback([&](std::size_t begin, std::size_t end) {
      strategy.gradient_ready(model.grads(), begin, end);
      issued_during_backward.push_back(comm->issued.size());
    });
    model.forward_backward(data().train, batch);
    // After the last layer's gradient, its bucket is already on the wire with overlap.
    CHECK(issued_during_backward ==
          (overlap ? std::vector<std::size_t>{1, 2, 3} : std::vector<std::size_t>{0, 0, 0}));
    strategy.synchronize(model.grads(), model.params());
    CHECK(comm->issued.size() == 3);
  }
}

TEST_CASE(
    "allreduce strategy: a failing rank aborts its communicator with the reason, an ending one "
    "does not") {
  auto comm = std::make_shared<RecordingCommunicator>();
  {
    gradsync::AllreduceStrategy strategy(comm, {});
    gradsync::Mlp model(kWidths, 4);
    strategy.init(model.params());
  }
  CHECK(comm->aborted.empty());  // a run that ends normally leaves its peers nothing to hear
  gradsync::AllreduceStrategy strategy(comm, {});
  strategy.abort("rank 0 failed: no space left on device");
  CHECK(comm->aborted == "rank 0 failed: no space left on device");
}
