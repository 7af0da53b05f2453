// The zero strategy (ZeRO stages 1 to 3): N ranks as N threads, each with its own model,
// sampler and communicator of the backend under test, against `single` on the global batch;
// and the shard layout it rests on.
#include <doctest/doctest.h>

#include <map>
#include <thread>

#include "allreduce/in_memory_store.h"
#include "allreduce/make_communicator.h"
#include "common/model_state_memory.h"
#include "model/mlp.h"
#include "model/sampler.h"
#include "strategies/zero/shard_layout.h"
#include "strategies/zero/zero_strategy.h"
#include "tests/support/compare.h"
#include "tests/support/digesting_strategy.h"
#include "tests/support/training.h"
#include "tests/support/zero_training.h"
#include "worker/worker_loop.h"

namespace {

using gradsync::LoopResult;

const std::vector<int> kWidths = {32, 64, 32, 10};
const gradsync::SgdOptions kSgd{0.05, 0.9, 1e-4};  // ZeroRun's

using gradsync::testing::train_zero;
using gradsync::testing::ZeroRun;

const std::vector<gradsync::LayerRange>& layers() {
  static const gradsync::Mlp model(kWidths, 1);
  return model.layers();
}

}  // namespace

TEST_CASE("zero shard layout: whole tensors, last first, equal slices and a shared tail") {
  const gradsync::Mlp model(kWidths, 1);
  // Units of at least 4 KiB, closed at a tensor: W1 b1 W2 b2 (2410 floats), W0 b0 (2112).
  for (int ranks : {1, 3, 4}) {
    CAPTURE(ranks);
    std::size_t shard = 0;
    std::vector<int> owners(model.param_count(), 0);
    for (int r = 0; r < ranks; ++r) {
      const auto layout =
          gradsync::shard_layout(model.tensors(), model.param_count(), ranks, 4096, r);
      REQUIRE(layout.units.size() == 2);
      CHECK(layout.units[0].floats() == 2410);
      CHECK(layout.units[0].end == model.param_count());
      CHECK(layout.units[1].end == layout.units[0].begin);  // contiguous, back to front
      CHECK(layout.units[1].begin == 0);
      for (const auto& unit : layout.units) {
        CHECK(unit.tail() < std::size_t(ranks));
        for (std::size_t i = unit.slice_begin(r); i < unit.slice_end(r); ++i) ++owners[i];
      }
      if (r == 0) shard = layout.shard_floats;
      CHECK(layout.shard_floats == shard);  // every rank's shard the same size
    }
    // Every float of the slices owned by exactly one rank; the tails by none of them.
    const auto layout =
        gradsync::shard_layout(model.tensors(), model.param_count(), ranks, 4096, 0);
    for (const auto& unit : layout.units) {
      for (std::size_t i = unit.begin; i < unit.tail_begin(); ++i) CHECK(owners[i] == 1);
      for (std::size_t i = unit.tail_begin(); i < unit.end; ++i) CHECK(owners[i] == 0);
    }
    CHECK(shard <= model.param_count() / std::size_t(ranks) + 2 * std::size_t(ranks));
  }
}

TEST_CASE("zero: stages 1 and 2 follow `single` on the global batch for 50 steps") {
  const auto single = gradsync::testing::train_single({64, 32}, 64, 50, kSgd);
  for (const std::string backend : {"tcp", "shm", "gloo"}) {
    const auto built = gradsync::compiled_backends();
    if (std::find(built.begin(), built.end(), backend) == built.end()) continue;
    for (int stage : {1, 2}) {
      for (int ranks : {2, 4}) {
        CAPTURE(backend);
        CAPTURE(stage);
        CAPTURE(ranks);
        std::vector<std::vector<std::uint64_t>> digests;
        ZeroRun run;
        run.stage = stage;
        run.backend = backend;
        run.digests = &digests;
        const auto results = train_zero(ranks, run, 50);
        for (int r = 1; r < ranks; ++r) CHECK(digests[r] == digests.front());
        const double diff = gradsync::testing::max_relative_difference(results.front().final_params,
                                                                       single, layers());
        MESSAGE("zero stage " << stage << " over " << backend << " with " << ranks
                              << " ranks vs single: max relative difference " << diff);
        CHECK(diff <= 1e-5);
      }
    }
  }
}

TEST_CASE("zero: a step moves one all-reduce's bytes, 2(N-1)/N of every unit") {
  for (int ranks : {2, 3, 4}) {
    CAPTURE(ranks);
    ZeroRun run;
    run.stage = 2;
    const std::int64_t steps = 10;
    const auto results = train_zero(ranks, run, steps);
    const gradsync::Mlp model(kWidths, 1);
    // Stage 2 on the MLP's layer storage: one unit per layer.
    std::vector<gradsync::TensorShape> per_layer;
    for (const auto& l : model.layer_spans()) per_layer.push_back({l.begin, l.size(), 1});
    const auto layout = gradsync::shard_layout(per_layer, model.param_count(), ranks, 1, 0);
    // Each unit: the reduce-scatter sends N-1 slices, the all-gather N-1 slices, from every
    // rank; a tail (under N floats) is all-reduced besides.
    std::uint64_t slices = 0, tails = 0;
    for (const auto& unit : layout.units) {
      slices += 2 * std::uint64_t(ranks - 1) * unit.slice * 4;
      tails += unit.tail();
    }
    for (int r = 0; r < ranks; ++r) {
      CAPTURE(r);
      if (tails == 0) {
        CHECK(results[r].totals.bytes_sent == steps * slices);  // N = 2: exactly
      } else {
        CHECK(results[r].totals.bytes_sent >= steps * slices);
        CHECK(results[r].totals.bytes_sent <= steps * (slices + 2 * tails * 4));
      }
    }
    // The ring all-reduce of the same buffer moves 2(N-1)/N of it: the same.
    const double ring = 2.0 * (ranks - 1) / ranks * model.param_count() * 4;
    CHECK(static_cast<double>(results[0].totals.bytes_sent) / steps ==
          doctest::Approx(ring).epsilon(0.01));
  }
}

TEST_CASE("zero: fp16, bf16 and topk on the reduce-scatter keep ranks bitwise equal") {
  ZeroRun plain;
  plain.stage = 2;
  const auto reference = train_zero(4, plain, 30);
  // (method, bound on the max relative difference to fp32 after 30 steps): 16-bit rounding of
  // each step's average; top-k at ratio 1 sends every value, summed in another order.
  const std::vector<std::pair<std::string, double>> methods = {
      {"fp16", 2e-2}, {"bf16", 1e-1}, {"topk", 1e-6}};
  for (const auto& [method, bound] : methods) {
    for (int stage : {1, 2}) {
      CAPTURE(method);
      CAPTURE(stage);
      std::vector<std::vector<std::uint64_t>> digests;
      ZeroRun run = plain;
      run.stage = stage;
      run.compression.method = method;
      run.compression.topk_ratio = 1.0;
      run.digests = &digests;
      const auto results = train_zero(4, run, 30);
      for (int r = 1; r < 4; ++r) CHECK(digests[r] == digests.front());
      const double diff = gradsync::testing::max_relative_difference(
          results.front().final_params, reference.front().final_params, layers());
      MESSAGE("zero stage " << stage << " " << method << " vs fp32: " << diff);
      CHECK(diff <= bound);
      if (method != "topk") CHECK(diff > 0);
    }
  }
}

TEST_CASE("zero: fp16 halves the reduce-scatter's bytes; the all-gather stays fp32") {
  ZeroRun run;
  run.stage = 2;
  const auto plain = train_zero(2, run, 10);
  run.compression.method = "fp16";
  const auto half = train_zero(2, run, 10);
  // N = 2: every unit's slices are even (no tail): reduce-scatter 2 bytes a value, all-gather 4.
  CHECK(static_cast<double>(half.front().totals.bytes_sent) ==
        doctest::Approx(0.75 * static_cast<double>(plain.front().totals.bytes_sent)));
}

// Stage 3 (FSDP's full shard): the MLP on the strategy's layer storage; its traffic (two
// all-gathers and one reduce-scatter of every layer, 1.5x stages 1 and 2), accumulation, and its
// measured model state at N = 1 (one rank in the process: the ledger is that rank's).
namespace {

const std::vector<gradsync::LayerRange>& layers_of(const std::vector<int>& widths) {
  static std::map<std::vector<int>, std::vector<gradsync::LayerRange>> cache;
  auto [it, fresh] = cache.try_emplace(widths);
  if (fresh) it->second = gradsync::Mlp::layout(widths);
  return it->second;
}

// Every rank ends with the same parameters, bit for bit (each layer is gathered from its
// owners' slices), and rank 0's within `bound` of `reference`.
void check_follows(const std::vector<gradsync::LoopResult>& results,
                   const std::vector<float>& reference, const std::vector<int>& widths,
                   double bound, const std::string& what) {
  for (std::size_t r = 1; r < results.size(); ++r) {
    CHECK(results[r].final_params == results.front().final_params);
  }
  const double diff = gradsync::testing::max_relative_difference(results.front().final_params,
                                                                 reference, layers_of(widths));
  MESSAGE(what << ": max relative difference " << diff);
  CHECK(diff <= bound);
}

}  // namespace

TEST_CASE("zero stage 3 follows `single` on the global batch for 50 steps") {
  const auto single =
      gradsync::testing::train_single({64, 32}, 64, 50, gradsync::SgdOptions{0.05, 0.9, 1e-4});
  for (const std::string backend : {"tcp", "shm", "gloo"}) {
    const auto built = gradsync::compiled_backends();
    if (std::find(built.begin(), built.end(), backend) == built.end()) continue;
    for (int ranks : {2, 4}) {
      CAPTURE(backend);
      CAPTURE(ranks);
      ZeroRun run;
      run.stage = 3;
      run.backend = backend;
      run.eval_every = 20;  // evaluation gathers on every rank, between steps
      check_follows(train_zero(ranks, run, 50), single, run.widths, 1e-5,
                    "zero stage 3 over " + backend + " with " + std::to_string(ranks) + " ranks");
    }
  }
}

TEST_CASE("zero stages 2 and 3 with train.accumulation_steps: the shard adds the micro-batches") {
  const auto single =
      gradsync::testing::train_single({64, 32}, 64, 30, gradsync::SgdOptions{0.05, 0.9, 1e-4});
  for (int stage : {2, 3}) {
    for (int ranks : {1, 2}) {
      CAPTURE(stage);
      CAPTURE(ranks);
      ZeroRun run;
      run.stage = stage;
      run.accumulation = 2;
      check_follows(train_zero(ranks, run, 30), single, run.widths, 1e-5,
                    "zero stage " + std::to_string(stage) + ", 2 micro-batches, " +
                        std::to_string(ranks) + " ranks");
    }
  }
}

TEST_CASE("zero stage 3 moves 1.5x the bytes of stage 1: two all-gathers and a reduce-scatter") {
  // Every layer a multiple of 4 floats (32·64+64, 64·32+32, 32·12+12): no tails at N = 2 or 4,
  // so every count below is exact.
  const std::vector<int> widths = {32, 64, 32, 12};
  std::size_t params = 0;
  for (const auto& layer : gradsync::Mlp::layout(widths)) params = layer.end();
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    const std::int64_t steps = 6;
    ZeroRun run;
    run.widths = widths;
    run.stage = 1;
    const auto one = train_zero(ranks, run, steps);
    run.stage = 3;
    run.eval_every = 2;  // evaluations gather too, and are no step's traffic
    const auto three = train_zero(ranks, run, steps);
    // Stage 1: (N-1)/N of the buffer reduce-scattered and as much all-gathered, the bytes of
    // one ring all-reduce; stage 3: one reduce-scatter and two all-gathers of every layer.
    const std::uint64_t slice_bytes = std::uint64_t(ranks - 1) * params / ranks * 4;
    for (int r = 0; r < ranks; ++r) {
      CAPTURE(r);
      CHECK(one[r].totals.bytes_sent == std::uint64_t(steps) * 2 * slice_bytes);
      CHECK(three[r].totals.bytes_sent == std::uint64_t(steps) * 3 * slice_bytes);
      CHECK(2 * three[r].totals.bytes_sent == 3 * one[r].totals.bytes_sent);
      CHECK(three[r].totals.bytes_received == three[r].totals.bytes_sent);
    }
  }
}

// What each stage holds at its peak, in floats, for layers of n[l] floats at N ranks: the
// formula of experiments/cost_model.h's zero_layer_peak_bytes, written out again here.
std::uint64_t peak_floats(int stage, const std::vector<std::uint64_t>& n, std::uint64_t ranks) {
  std::uint64_t total = 0, grads = 0, window = 0;
  for (std::size_t l = 0; l < n.size(); ++l) {
    const std::uint64_t before = l > 0 ? n[l - 1] : 0, after = l + 1 < n.size() ? n[l + 1] : 0;
    total += n[l];
    grads = std::max(grads, n[l] + after);                     // computing l, l + 1 in flight
    window = std::max(window, before + 2 * n[l] + after);      // and l, l - 1 gathered
  }
  const std::uint64_t shards = 3 * (total / ranks);  // parameters, gradients, momentum
  if (stage == 1) return 2 * total + shards;  // the model's full buffers
  if (stage == 2) return total + grads + shards;
  return window + shards;
}

TEST_CASE("zero at N = 1: each stage's measured peak is its formula") {
  const std::vector<int> widths = {32, 64, 64, 64, 10};
  std::vector<std::uint64_t> n;  // each layer's floats
  for (const auto& layer : gradsync::Mlp::layout(widths)) {
    n.push_back(layer.end() - layer.weight_offset);
  }
  auto& ledger = gradsync::ModelStateMemory::instance();
  for (int stage : {1, 2, 3}) {
    CAPTURE(stage);
    const std::uint64_t start = ledger.current_total();
    ledger.reset_peaks();
    ZeroRun run;
    run.widths = widths;
    run.stage = stage;
    train_zero(1, run, 5);
    const std::uint64_t formula = peak_floats(stage, n, 1) * 4;
    const std::uint64_t peak = ledger.peak_total() - start;
    MESSAGE("stage " << stage << ", N = 1: peak " << peak << " bytes, formula " << formula);
    CHECK(static_cast<double>(peak) ==
          doctest::Approx(static_cast<double>(formula)).epsilon(0.05));
    CHECK(ledger.current_total() == start);  // everything freed with the run
  }
}

TEST_CASE("zero stage 3 refused: a model without layer storage") {
  ZeroRun run;
  gradsync::ZeroStrategyOptions options;
  options.stage = 3;
  options.params = 10;
  options.tensors = {{0, 10, 1}};
  gradsync::InMemoryStore store;
  auto comm = gradsync::make_communicator(store, 0, 1, gradsync::CommunicatorOptions{});
  CHECK_THROWS_WITH_AS(gradsync::ZeroStrategy(comm, options),
                       doctest::Contains("Model::layer_spans"), gradsync::Error);
  options.stage = 4;
  options.layers = {{0, 10}};
  CHECK_THROWS_WITH_AS(gradsync::ZeroStrategy(comm, options), doctest::Contains("zero.stage"),
                       gradsync::ConfigError);
}
