// Batch norm under each strategy, as the real systems keep it (README, "Batch norm under each
// strategy"), on a tiny ResNet over 8x8 one-channel synthetic images:
//
//   single      statistics of the global batch
//   dp          each replica its chunk's; replica 0's running statistics kept (DataParallel)
//   allreduce   each rank its own batch's; rank 0's running statistics broadcast after every
//               step with comm.broadcast_buffers (DDP), kept per rank without
//   sync        model.sync_batchnorm: the statistics all-reduced, so allreduce and zero follow
//               `single` on the global batch (SyncBatchNorm)
//
// and running statistics in checkpoints: a resumed run ends bitwise where an uninterrupted one
// does, parameters and buffers. N ranks run as N threads over the communicators the worker
// processes use, built through make_strategies as `gradsync worker` builds them.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "allreduce/in_memory_store.h"
#include "allreduce/make_communicator.h"
#include "common/checkpoint_buffers.h"
#include "common/error.h"
#include "model/optimizer/sgd.h"
#include "model/resnet/resnet.h"
#include "model/sampler.h"
#include "model/synthetic_data.h"
#include "strategies/make_strategy.h"
#include "tests/support/compare.h"
#include "tests/support/preset_text.h"
#include "tests/support/temp_dir.h"
#include "worker/checkpoints.h"
#include "worker/in_process.h"
#include "worker/model_factory.h"
#include "worker/run_plan.h"
#include "worker/worker_loop.h"

namespace {

namespace fs = std::filesystem;
using gradsync::Config;
using gradsync::LoopResult;
using gradsync::ResNet;
using gradsync::TrainingState;

constexpr int kSide = 8;      // 8 x 8 images: data.dim 64
constexpr int kChannels = 4;  // model.resnet_width: the stem's batch norm has 4 channels

// 2048 training samples of 64 features (one 8x8 image each), 10 classes; built once.
const gradsync::TrainTest& images() {
  static const gradsync::TrainTest set = [] {
    gradsync::SyntheticDataOptions options;
    options.train_samples = 2048;
    options.test_samples = 256;
    options.dim = kSide * kSide;
    return gradsync::make_synthetic_data(options);
  }();
  return set;
}

const std::vector<int>& widths() {
  static const std::vector<int> w = {kSide * kSide, 10};
  return w;
}

// A ResNet-8 of width 4 on the images; `batch` per rank or replica.
Config resnet_config(const std::string& strategy, int workers, int batch) {
  Config config;
  config.strategy = strategy;
  config.workers = workers;
  config.data.kind = "synthetic";
  config.data.dim = kSide * kSide;
  config.model.kind = "resnet";
  config.model.resnet_width = kChannels;
  config.train.batch = batch;
  config.train.lr = 0.05;
  config.train.momentum = 0.9;
  config.train.weight_decay = 1e-4;
  config.comm.timeout_s = 20;
  config.comm.bucket_mb = 4096.0 / (1 << 20);  // small buckets: several in flight in backward
  return config;
}

const std::vector<ResNet::Layer>& layers() {
  static const auto model = gradsync::make_model(resnet_config("single", 1, 1), widths(), 1);
  static const std::vector<ResNet::Layer> l = dynamic_cast<ResNet&>(*model).layers();
  return l;
}

// The worst tensor_relative_difference over the ResNet's layers.
double params_difference(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (const ResNet::Layer& l : layers()) {
    worst = std::max(
        worst, gradsync::testing::tensor_relative_difference(a.subspan(l.begin, l.end - l.begin),
                                                             b.subspan(l.begin, l.end - l.begin)));
  }
  return worst;
}

// Records a copy of the model's buffers after every synchronize() of the strategy it wraps.
class BufferRecorder final : public gradsync::SyncStrategy {
 public:
  BufferRecorder(SyncStrategy& inner, std::vector<std::vector<float>>& out)
      : inner_(inner), out_(out) {}
  std::string_view name() const override { return inner_.name(); }
  int rank() const override { return inner_.rank(); }
  void attach_buffers(std::span<float> buffers) override {
    buffers_ = buffers;
    inner_.attach_buffers(buffers);
  }
  void init(std::span<float> params) override { inner_.init(params); }
  void gradient_ready(std::span<float> grads, std::size_t begin, std::size_t end) override {
    inner_.gradient_ready(grads, begin, end);
  }
  void synchronize(std::span<float> grads, std::span<float> params) override {
    inner_.synchronize(grads, params);
    out_.emplace_back(buffers_.begin(), buffers_.end());
  }
  void finish(std::span<float> grads, std::span<float> params) override {
    inner_.finish(grads, params);
  }
  gradsync::StepStats last_step_stats() const override { return inner_.last_step_stats(); }
  std::optional<OwnParts> own_checkpoint_parts(std::span<const float> params) const override {
    return inner_.own_checkpoint_parts(params);
  }
  gradsync::Optimizer* optimizer() override { return inner_.optimizer(); }
  void abort(const std::string& reason) override { inner_.abort(reason); }

 private:
  SyncStrategy& inner_;
  std::vector<std::vector<float>>& out_;
  std::span<float> buffers_;
};

struct Ranks {
  // [rank][step]: each rank's buffers after each step.
  std::vector<std::vector<std::vector<float>>> buffers;
  std::vector<LoopResult> results;
};

// `config.workers` ranks of config.strategy (allreduce, zero) as threads over a TcpRing, each
// model and strategy made as a worker process makes them; rank 0 (zero: every rank) writes
// checkpoints when `checkpoints` is set; `resume`: the state every rank starts from.
// `steps_per_rank`, when given, replaces `steps` (uneven inputs).
Ranks train_ranks(const Config& config, std::int64_t steps,
                  const gradsync::Checkpointer* checkpoints = nullptr,
                  const TrainingState* resume = nullptr,
                  const std::vector<std::int64_t>& steps_per_rank = {}) {
  const int n = config.workers;
  gradsync::InMemoryStore store;
  Ranks out;
  out.buffers.resize(static_cast<std::size_t>(n));
  out.results.resize(static_cast<std::size_t>(n));
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        try {
          gradsync::CommunicatorOptions communicator;
          communicator.backend = "tcp";
          communicator.tcp.timeout = std::chrono::milliseconds(20000);
          std::shared_ptr<gradsync::Communicator> comm =
              gradsync::make_communicator(store, r, n, communicator);
          // Before the strategy, as in a worker process: destroyed after it.
          const auto model = gradsync::make_model(config, widths(), config.train.batch);
          gradsync::StrategyOptions options = gradsync::strategy_options(config, 0, {}, r);
          const gradsync::ProcessContext process{.rank = r,
                                                 .model = model.get(),
                                                 .comm = comm,
                                                 .first_step = resume ? resume->step : 0};
          auto strategy = std::move(gradsync::make_strategies(options, process).front());
          BufferRecorder recorder(*strategy, out.buffers[r]);
          gradsync::DistributedSampler sampler(images().train.size, r, n, config.train.batch,
                                               config.train.seed);
          gradsync::LoopOptions loop;
          loop.steps = steps_per_rank.empty() ? steps : steps_per_rank[r];
          loop.keep_params = true;
          loop.evaluate = false;
          loop.resume = resume;
          gradsync::LoopSinks sinks;
          if (checkpoints && (r == 0 || config.strategy == "zero"))
            sinks.checkpointer = checkpoints;
          out.results[r] =
              gradsync::run_worker_loop(*model, recorder, sampler, images(), loop, sinks);
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
  }
  for (int r = 0; r < n; ++r) REQUIRE_MESSAGE(errors[r].empty(), "rank " << r << ": " << errors[r]);
  return out;
}

// single or dp in this process.
std::vector<LoopResult> train_here(const Config& config, std::int64_t steps,
                                   const gradsync::Checkpointer* checkpoints = nullptr,
                                   const TrainingState* resume = nullptr) {
  gradsync::LoopOptions loop;
  loop.steps = steps;
  loop.keep_params = true;
  loop.evaluate = false;
  loop.resume = resume;
  gradsync::LoopSinks rank0;
  rank0.checkpointer = checkpoints;
  return gradsync::train_in_process(config, images(), loop, rank0, {});
}

// What one rank computes on its own batch of step 0, as a standalone model.
struct LocalStep {
  std::vector<float> grads, buffers;
};
LocalStep local_step(const Config& config, int rank, int ranks) {
  const auto model = gradsync::make_model(config, widths(), config.train.batch);
  gradsync::DistributedSampler sampler(images().train.size, rank, ranks, config.train.batch,
                                       config.train.seed);
  model->forward_backward(images().train, sampler.indices(0));
  return {{model->grads().begin(), model->grads().end()},
          {model->buffers().begin(), model->buffers().end()}};
}

}  // namespace

TEST_CASE(
    "batch norm: with sync_batchnorm, allreduce and zero follow `single` on the global "
    "batch") {
  const int batch = 8;
  for (const auto& [strategy, ranks] :
       std::vector<std::pair<std::string, int>>{{"allreduce", 2}, {"allreduce", 4}, {"zero", 2}}) {
    CAPTURE(strategy);
    CAPTURE(ranks);
    Config config = resnet_config(strategy, ranks, batch);
    config.model.sync_batchnorm = true;
    config.zero.stage = 2;  // its reduce-scatters in flight while backward's reductions run
    // Each rank keeps its own buffers: the statistics make them equal all the same.
    config.comm.broadcast_buffers = false;
    const Ranks run = train_ranks(config, 50);
    const auto single = train_here(resnet_config("single", 1, batch * ranks), 50).front();
    for (int r = 1; r < ranks; ++r) {
      CHECK(run.results[r].final_params == run.results[0].final_params);
      CHECK(run.buffers[r] == run.buffers[0]);  // every step
    }
    const double params = params_difference(run.results[0].final_params, single.final_params);
    const double buffers = gradsync::testing::tensor_relative_difference(
        run.results[0].final_buffers, single.final_buffers);
    MESSAGE(strategy << " with " << ranks << " ranks and sync_batchnorm vs single after 50 steps: "
                     << "parameters " << params << ", running statistics " << buffers);
    CHECK(params <= 1e-4);
    CHECK(buffers <= 1e-4);
  }
}

TEST_CASE("batch norm: without sync, DDP's per-rank statistics and its gap to `single`") {
  const int batch = 8, ranks = 2;
  Config config = resnet_config("allreduce", ranks, batch);
  config.comm.broadcast_buffers = false;  // to see each rank's own
  const Ranks one = train_ranks(config, 1);
  const auto single = train_here(resnet_config("single", 1, batch * ranks), 1).front();

  // Each rank's step is a standalone model's on its own batch: its running statistics exactly,
  // and DDP's update is the SGD step of the two gradients' average.
  const LocalStep rank0 = local_step(config, 0, ranks), rank1 = local_step(config, 1, ranks);
  CHECK(one.results[0].final_buffers == rank0.buffers);
  CHECK(one.results[1].final_buffers == rank1.buffers);
  std::vector<float> average(rank0.grads.size()), params(rank0.grads.size());
  for (std::size_t i = 0; i < average.size(); ++i)
    average[i] = (rank0.grads[i] + rank1.grads[i]) / 2;
  const auto model = gradsync::make_model(config, widths(), batch);
  std::copy(model->params().begin(), model->params().end(), params.begin());
  gradsync::Sgd sgd(params.size(), gradsync::sgd_options(config));
  sgd.step(params, average);
  CHECK(one.results[0].final_params == params);

  // The stem's norm sees the same input everywhere (conv1 of the images): the global batch's
  // mean is the ranks' means' average, but its variance adds the spread of the ranks' means,
  // which per-rank statistics never see (law of total variance).
  const int c = kChannels;
  const double m = double(batch) * kSide * kSide;  // values per channel on one rank
  double missing = 0, total = 0;
  for (int ch = 0; ch < c; ++ch) {
    const double mean0 = one.results[0].final_buffers[ch] / 0.1;  // running = 0.1 batch mean
    const double mean1 = one.results[1].final_buffers[ch] / 0.1;
    const double global_mean = single.final_buffers[ch] / 0.1;
    CHECK(global_mean == doctest::Approx((mean0 + mean1) / 2).epsilon(1e-4).scale(1e-3));
    // running variance = 0.9 + 0.1 * unbiased variance; biased = unbiased (M - 1) / M.
    auto biased = [&](float running, double values) {
      return (double(running) - 0.9) / 0.1 * (values - 1) / values;
    };
    const double within = (biased(one.results[0].final_buffers[c + ch], m) +
                           biased(one.results[1].final_buffers[c + ch], m)) /
                          2;
    const double between = ((mean0 - global_mean) * (mean0 - global_mean) +
                            (mean1 - global_mean) * (mean1 - global_mean)) /
                           2;
    const double global = biased(single.final_buffers[c + ch], 2 * m);
    CHECK(global == doctest::Approx(within + between).epsilon(1e-4));
    missing += between;
    total += global;
  }
  MESSAGE("per-rank statistics of 2 ranks of " << batch << " images miss " << 100 * missing / total
                                               << "% of the stem's batch variance");
  CHECK(missing > 0);
  // Deeper norms see fewer values per channel (stage 3: 2 x 2 pixels an image), and inputs that
  // the ranks' own normalisations already made differ.
  const double gap = gradsync::testing::tensor_relative_difference(one.results[0].final_buffers,
                                                                   single.final_buffers);
  MESSAGE("after one step, rank 0's running statistics differ from single's by " << gap);
  CHECK(gap > 1e-4);

  // Over 50 steps DDP drifts from `single` by far more than SyncBatchNorm's float rounding.
  config.comm.broadcast_buffers = true;
  const Ranks ddp = train_ranks(config, 50);
  const auto single50 = train_here(resnet_config("single", 1, batch * ranks), 50).front();
  const double drift = params_difference(ddp.results[0].final_params, single50.final_params);
  MESSAGE("allreduce (per-rank statistics) vs single after 50 steps: parameters differ by "
          << drift);
  CHECK(drift > 1e-2);
}

TEST_CASE("batch norm: broadcast_buffers gives every rank rank 0's after each step") {
  const int batch = 8;
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    Config config = resnet_config("allreduce", ranks, batch);
    const Ranks on = train_ranks(config, 5);
    config.comm.broadcast_buffers = false;
    const Ranks off = train_ranks(config, 5);
    for (int r = 1; r < ranks; ++r) {
      CAPTURE(r);
      CHECK(on.buffers[r] == on.buffers[0]);
      for (std::size_t step = 0; step < 5; ++step)
        CHECK(off.buffers[r][step] != off.buffers[0][step]);
      // Statistics are read only by evaluation: the trajectory is the same either way.
      CHECK(off.results[r].final_params == on.results[0].final_params);
    }
    // Rank 0 keeps its own either way.
    CHECK(on.buffers[0] == off.buffers[0]);
  }
}

TEST_CASE("batch norm: under Join the buffers come from the highest rank still training") {
  // DDP's authoritative rank (_find_common_rank): each step's broadcast comes from the highest
  // rank still training, and a rank that has joined receives. Ranks 0, 3 and 1 run out after 2,
  // 3 and 4 steps: rank 3 is the root for 3 steps, then rank 2, which trains longest.
  Config config = resnet_config("allreduce", 4, 8);
  config.comm.uneven_inputs = true;
  const Ranks run = train_ranks(config, 0, nullptr, nullptr, {2, 4, 6, 3});
  REQUIRE(run.buffers[0].size() == 2);
  REQUIRE(run.buffers[3].size() == 3);
  REQUIRE(run.buffers[2].size() == 6);
  for (int r : {0, 1, 2}) CHECK(run.buffers[r][1] == run.buffers[3][1]);
  CHECK(run.buffers[1][3] == run.buffers[2][3]);
  for (int r : {0, 1, 3}) {
    CAPTURE(r);
    CHECK(run.results[r].final_buffers == run.results[2].final_buffers);
    CHECK(run.results[r].final_params == run.results[2].final_params);
  }
}

TEST_CASE("batch norm: dp keeps replica 0's statistics, as DDP with broadcast_buffers does") {
  const int batch = 8, ranks = 2;
  const auto dp = train_here(resnet_config("dp", ranks, batch), 20);
  CHECK(dp[1].final_buffers == dp[0].final_buffers);
  // Replica 0's first step is a standalone model's on its chunk.
  const auto dp1 = train_here(resnet_config("dp", ranks, batch), 1);
  CHECK(dp1[0].final_buffers == local_step(resnet_config("dp", ranks, batch), 0, ranks).buffers);
  // Per-replica statistics and averaged gradients: DataParallel's trajectory is DDP's. With two
  // ranks both average (a + b) / 2 alike, so bit for bit.
  const Ranks ddp = train_ranks(resnet_config("allreduce", ranks, batch), 20);
  CHECK(dp[0].final_params == ddp.results[0].final_params);
  CHECK(dp[0].final_buffers == ddp.results[0].final_buffers);
}

TEST_CASE("batch norm: sync_batchnorm is refused where there is no communicator, in one line") {
  using gradsync::testing::error_of;
  const std::string head =
      "data: {kind: synthetic, dim: 64}\nmodel: {kind: resnet, sync_batchnorm: true}\n";
  CHECK(error_of(head + "strategy: dp\nworkers: 2\n") ==
        "presets/x.yaml:2: model.sync_batchnorm: dp's replicas share no communicator: "
        "SyncBatchNorm runs under allreduce or zero (torch's, under DistributedDataParallel "
        "only)");
  CHECK(error_of(head + "strategy: ps\nworkers: 2\n") ==
        "presets/x.yaml:2: model.sync_batchnorm: ps workers have no collective among them: "
        "SyncBatchNorm runs under allreduce or zero");
  CHECK(error_of(head + "strategy: allreduce\nworkers: 2\ncomm: {uneven_inputs: true}\n") ==
        "presets/x.yaml:5: model.sync_batchnorm: not with comm.uneven_inputs: a rank that has "
        "run out of batches cannot join the others' forward (DDP's Join does not support "
        "SyncBatchNorm either)");
  CHECK_NOTHROW(gradsync::testing::load(head));  // single: one replica, nothing to reduce
  CHECK_NOTHROW(gradsync::testing::load(head + "strategy: allreduce\nworkers: 2\n"));
  CHECK_NOTHROW(gradsync::testing::load(head + "strategy: zero\nworkers: 2\n"));
  // Callers that skip the presets hear the same from make_strategies.
  Config config = resnet_config("dp", 2, 8);
  config.model.sync_batchnorm = true;
  CHECK_THROWS_AS(gradsync::make_strategies(gradsync::strategy_options(config)),
                  gradsync::ConfigError);
}

TEST_CASE(
    "batch norm: a checkpoint keeps the running statistics; resume ends where an "
    "uninterrupted run does") {
  const int batch = 8;
  struct Case {
    std::string strategy;
    int workers;
    bool broadcast_buffers;
  };
  for (const Case& c : std::vector<Case>{{"single", 1, true},
                                         {"dp", 2, true},
                                         {"allreduce", 2, true},
                                         {"allreduce", 2, false},
                                         {"zero", 2, true}}) {
    CAPTURE(c.strategy);
    CAPTURE(c.broadcast_buffers);
    gradsync::testing::TempDir dir;
    Config config = resnet_config(c.strategy, c.workers, batch);
    config.comm.broadcast_buffers = c.broadcast_buffers;
    const std::string description = gradsync::model_description(config, widths());
    const gradsync::Checkpointer checkpoints(dir.path().string(), 6, 10, description, "");
    const bool ranks = gradsync::uses_communicator(c.strategy);
    const LoopResult whole = ranks ? train_ranks(config, 10, &checkpoints).results.front()
                                   : train_here(config, 10, &checkpoints).front();
    const std::string step6 = gradsync::checkpoint_step_folder(dir.path().string(), 6);
    REQUIRE(fs::exists(fs::path(step6) / gradsync::kCheckpointBuffersFile));
    const auto total = static_cast<std::uint64_t>(gradsync::model_parameters(config, widths()));
    const TrainingState state = gradsync::load_training_state(step6, description, total, 0, total);
    CHECK(state.buffers.size() == whole.final_buffers.size());
    const LoopResult resumed = ranks ? train_ranks(config, 10, nullptr, &state).results.front()
                                     : train_here(config, 10, nullptr, &state).front();
    CHECK(resumed.final_params == whole.final_params);
    CHECK(resumed.final_buffers == whole.final_buffers);
  }
}

TEST_CASE(
    "batch norm: a checkpoint without its running statistics, or with bad ones, is "
    "refused naming the file") {
  gradsync::testing::TempDir dir;
  Config config = resnet_config("single", 1, 8);
  const std::string description = gradsync::model_description(config, widths());
  const gradsync::Checkpointer checkpoints(dir.path().string(), 2, 2, description, "");
  train_here(config, 2, &checkpoints);
  const std::string step2 = gradsync::checkpoint_step_folder(dir.path().string(), 2);
  const std::string file = (fs::path(step2) / gradsync::kCheckpointBuffersFile).string();
  const auto total = static_cast<std::uint64_t>(gradsync::model_parameters(config, widths()));
  const std::string bytes = [&] {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  auto write = [&](const std::string& text) {
    std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
  };
  auto resume_error = [&] {
    try {
      const TrainingState state =
          gradsync::load_training_state(step2, description, total, 0, total);
      train_here(config, 4, nullptr, &state);
    } catch (const gradsync::DataError& e) {
      return std::string(e.what());
    }
    return std::string("no DataError");
  };
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x40;
  write(flipped);
  CHECK(resume_error() == file + ": corrupted: CRC-32 mismatch");
  write(bytes.substr(0, 50));
  CHECK(resume_error().starts_with(file + ": truncated"));
  fs::remove(file);
  CHECK(resume_error().starts_with(file + ": missing: this model keeps "));
  write(bytes);
  CHECK(resume_error() == "no DataError");
}
