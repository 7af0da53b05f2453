// The zero strategy over MPI, every stage, trained as `gradsync worker` trains it: each process
// of the mpirun job is one rank with its own MLP (stages 2 and 3 on the strategy's layer
// storage, as make_strategy hands it), sampler and MpiCommunicator. Each stage must follow
// `single` on the global batch after 50 steps, with momentum and weight decay, and leave every
// rank the same parameters, as over tcp, shm and gloo (tests/unit/test_zero_strategy.cpp). The
// world size is the job's: run_mpi_tests.py runs 1 to 4.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "model/mlp.h"
#include "model/sampler.h"
#include "strategies/zero/zero_strategy.h"
#include "tests/mpi/mpi_world.h"
#include "tests/support/compare.h"
#include "tests/support/training.h"
#include "worker/worker_loop.h"

using namespace gradsync::testing;

TEST_CASE("mpi: zero stages 1, 2 and 3 follow `single` for 50 steps, ranks equal") {
  const MpiWorld& world = mpi_world();
  const int n = world.size, r = world.rank;
  constexpr int kBatch = 16;
  constexpr std::int64_t kSteps = 50;
  const std::vector<int> widths = {32, 64, 32, 10};
  const gradsync::SgdOptions sgd{0.05, 0.9, 1e-4};
  static const gradsync::Mlp shape(widths, 1);
  const std::vector<float> single = train_single({64, 32}, kBatch * n, kSteps, sgd);

  for (const int stage : {1, 2, 3}) {
    CAPTURE(stage);
    std::vector<float> params;
    {
      std::shared_ptr<gradsync::Communicator> comm =
          mpi_communicator("zero" + std::to_string(stage));
      gradsync::Mlp model(widths, kBatch,
                          stage == 3   ? gradsync::MlpBuffers::kNone
                          : stage == 2 ? gradsync::MlpBuffers::kParamsOnly
                                       : gradsync::MlpBuffers::kFull);
      model.init_params(1 + std::uint64_t(r) * 100);  // unequal: init's broadcast evens them
      gradsync::ZeroStrategyOptions options;
      options.stage = stage;
      options.unit_bytes = 4096;  // several units: reductions in flight during backward
      options.sgd = sgd;
      options.tensors = model.tensors();
      options.params = model.param_count();
      if (stage >= 2) options.layers = model.layer_spans();
      gradsync::ZeroStrategy strategy(comm, options);
      if (gradsync::LayerStorage* storage = strategy.layer_storage()) {
        REQUIRE(model.set_layer_storage(storage));
      }
      gradsync::DistributedSampler sampler(synthetic_data().train.size, r, n, kBatch, 1);
      gradsync::LoopOptions loop;
      loop.steps = kSteps;
      loop.keep_params = true;
      params = gradsync::run_worker_loop(model, strategy, sampler, synthetic_data(), loop, {})
                   .final_params;
    }
    REQUIRE(params.size() == shape.param_count());

    // Every rank's final parameters through the Store, compared with rank 0's bit for bit.
    gradsync::Store& store = *world.store;
    const std::string key = "zero" + std::to_string(stage) + "/params/";
    std::string mine(params.size() * sizeof(float), '\0');
    std::memcpy(mine.data(), params.data(), mine.size());
    store.set(key + std::to_string(r), mine);
    CHECK_MESSAGE(store.get(key + "0", std::chrono::seconds(30)) == mine,
                  "rank " << r << " ends with other parameters than rank 0");

    const double diff = max_relative_difference(params, single, shape.layers());
    MESSAGE("zero stage " << stage << " over mpi with " << n << " ranks vs single: " << diff);
    CHECK(diff <= 1e-5);
  }
}
