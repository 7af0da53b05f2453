// The allreduce strategy over MPI, trained as `gradsync worker` trains: every process of the
// mpirun job is one rank with its own model and sampler, and its gradients are averaged by
// MpiCommunicator. It must follow `single` on the global batch and keep every rank's parameters
// bitwise equal after every step, as it does over tcp and gloo (tests/unit/
// test_allreduce_strategy.cpp). The world size is the job's: run_mpi_tests.py runs 1 to 4.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "model/mlp.h"
#include "model/sampler.h"
#include "strategies/allreduce/allreduce_strategy.h"
#include "tests/mpi/mpi_world.h"
#include "tests/support/compare.h"
#include "tests/support/digesting_strategy.h"
#include "tests/support/training.h"
#include "worker/worker_loop.h"

using namespace gradsync::testing;

TEST_CASE("mpi: the allreduce strategy follows `single` for 50 steps, ranks bitwise equal") {
  const MpiWorld& world = mpi_world();
  const int n = world.size, r = world.rank;
  constexpr int kBatch = 16;
  constexpr std::int64_t kSteps = 50;
  const std::vector<int> widths = {32, 64, 32, 10};
  const gradsync::SgdOptions sgd{0.05, 0.9, 1e-4};

  std::vector<std::uint64_t> digests;
  std::vector<float> params;
  {
    std::shared_ptr<gradsync::Communicator> comm = mpi_communicator("training");
    gradsync::AllreduceStrategyOptions options;
    options.bucket_bytes = 4096;  // small buckets: several reductions in flight in backward
    options.sgd = sgd;
    gradsync::AllreduceStrategy strategy(comm, options);
    gradsync::Mlp model(widths, kBatch);
    model.init_params(1 + std::uint64_t(r) * 100);  // unequal: init's broadcast must equalise
    gradsync::DistributedSampler sampler(synthetic_data().train.size, r, n, kBatch, 1);
    gradsync::LoopOptions loop;
    loop.steps = kSteps;
    loop.keep_params = true;
    DigestingStrategy digesting(strategy, digests);
    params = gradsync::run_worker_loop(model, digesting, sampler, synthetic_data(), loop, {})
                 .final_params;
  }
  REQUIRE(digests.size() == std::size_t(kSteps));

  // Every rank's digests through the Store, compared with rank 0's step by step.
  gradsync::Store& store = *world.store;
  std::string mine(digests.size() * sizeof(std::uint64_t), '\0');
  std::memcpy(mine.data(), digests.data(), mine.size());
  store.set("training/digests/" + std::to_string(r), mine);
  const std::string first = store.get("training/digests/0", std::chrono::seconds(30));
  for (std::int64_t step = 0; step < kSteps; ++step) {
    std::uint64_t theirs = 0;
    std::memcpy(&theirs, first.data() + step * sizeof theirs, sizeof theirs);
    CHECK_MESSAGE(digests[std::size_t(step)] == theirs,
                  "rank " << r << " differs from rank 0 after step " << step + 1);
  }

  static const gradsync::Mlp shape(widths, 1);
  const double diff = max_relative_difference(
      params, train_single({64, 32}, kBatch * n, kSteps, sgd), shape.layers());
  MESSAGE("mpi with " << n << " ranks vs single: max relative difference " << diff);
  CHECK(diff <= 1e-5);
}
