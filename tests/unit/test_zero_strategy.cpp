// The zero strategy (ZeRO stages 1 and 2): N ranks as N threads, each with its own model,
// sampler and communicator of the backend under test, against `single` on the global batch;
// and the shard layout it rests on.
#include <doctest/doctest.h>

#include <thread>

#include "allreduce/in_memory_store.h"
#include "allreduce/make_communicator.h"
#include "model/mlp.h"
#include "model/sampler.h"
#include "strategies/zero/shard_layout.h"
#include "strategies/zero/zero_strategy.h"
#include "tests/support/compare.h"
#include "tests/support/digesting_strategy.h"
#include "tests/support/training.h"
#include "worker/worker_loop.h"

namespace {

using gradsync::LoopResult;

const std::vector<int> kWidths = {32, 64, 32, 10};
const gradsync::SgdOptions kSgd{0.05, 0.9, 1e-4};

struct ZeroRun {
  int stage = 1;
  std::string backend = "tcp";
  std::size_t unit_bytes = 4096;
  gradsync::CompressionOptions compression;
  std::vector<std::vector<std::uint64_t>>* digests = nullptr;
};

std::vector<LoopResult> train_zero(int ranks, const ZeroRun& run, std::int64_t steps) {
  gradsync::InMemoryStore store;
  std::vector<LoopResult> results(static_cast<std::size_t>(ranks));
  std::vector<std::string> errors(static_cast<std::size_t>(ranks));
  if (run.digests) run.digests->assign(static_cast<std::size_t>(ranks), {});
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        try {
          gradsync::CommunicatorOptions communicator;
          communicator.backend = run.backend;
          communicator.tcp.timeout = std::chrono::milliseconds(20000);
          auto comm = gradsync::make_communicator(store, r, ranks, communicator);
          const int batch = 64 / ranks;
          gradsync::Mlp model(kWidths, batch);
          model.init_params(1 + static_cast<std::uint64_t>(r) * 100);  // init's broadcast evens
          gradsync::ZeroStrategyOptions options;
          options.stage = run.stage;
          options.unit_bytes = run.unit_bytes;
          options.sgd = kSgd;
          options.tensors = model.tensors();
          options.params = model.param_count();
          options.compression = run.compression;
          gradsync::ZeroStrategy strategy(comm, options);
          gradsync::DistributedSampler sampler(gradsync::testing::synthetic_data().train.size, r,
                                               ranks, batch, 1);
          gradsync::LoopOptions loop;
          loop.steps = steps;
          loop.keep_params = true;
          const auto& data = gradsync::testing::synthetic_data();
          if (run.digests) {
            gradsync::testing::DigestingStrategy digesting(strategy, (*run.digests)[r]);
            results[r] = gradsync::run_worker_loop(model, digesting, sampler, data, loop, {});
          } else {
            results[r] = gradsync::run_worker_loop(model, strategy, sampler, data, loop, {});
          }
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
  }
  for (int r = 0; r < ranks; ++r)
    REQUIRE_MESSAGE(errors[r].empty(), "rank " << r << ": " << errors[r]);
  return results;
}

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
    const auto layout =
        gradsync::shard_layout(model.tensors(), model.param_count(), ranks, 4096, 0);
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
