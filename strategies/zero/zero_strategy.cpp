#include "strategies/zero/zero_strategy.h"

#include <algorithm>
#include <functional>

#include "common/error.h"
#include "common/model_state_memory.h"
#include "common/stopwatch.h"
#include "model/make_optimizer.h"

namespace gradsync {

// The optimizer of this rank's slices, seen as one over the whole buffer (what checkpoints and
// resuming speak): load_state keeps this rank's slices of a full momentum buffer, step updates
// this rank's slices of full buffers. The strategy itself steps the shards directly.
class ZeroStrategy::ShardedOptimizer final : public Optimizer {
 public:
  ShardedOptimizer(const ShardLayout& layout, std::size_t params, const SgdOptions& sgd)
      : layout_(layout),
        params_(params),
        sgd_(make_sgd(layout.shard_floats, sgd, -1)),
        param_shard(ModelState::kParams, layout.shard_floats),
        grad_shard(ModelState::kGrads, layout.shard_floats) {}

  // Copies this rank's slice and the tail of every unit of `full` into `shard`, or back.
  void gather(std::span<const float> full, std::span<float> shard) const {
    for (const ShardUnit& u : layout_.units) {
      std::copy_n(full.begin() + std::ptrdiff_t(u.slice_begin(layout_.rank)), u.slice,
                  shard.begin() + std::ptrdiff_t(u.shard_offset));
      std::copy_n(full.begin() + std::ptrdiff_t(u.tail_begin()), u.tail(),
                  shard.begin() + std::ptrdiff_t(u.shard_offset + u.slice));
    }
  }
  void scatter(std::span<const float> shard, std::span<float> full) const {
    for (const ShardUnit& u : layout_.units) {
      std::copy_n(shard.begin() + std::ptrdiff_t(u.shard_offset), u.slice,
                  full.begin() + std::ptrdiff_t(u.slice_begin(layout_.rank)));
      std::copy_n(shard.begin() + std::ptrdiff_t(u.shard_offset + u.slice), u.tail(),
                  full.begin() + std::ptrdiff_t(u.tail_begin()));
    }
  }

  void step_shards() { sgd_->step(param_shard, grad_shard); }
  // The momentum of this rank's slices and tails, in shard order.
  std::vector<float> shard_momentum() const {
    std::vector<float> momentum(layout_.shard_floats);
    sgd_->save_state(momentum);
    return momentum;
  }

  void step(std::span<float> params, std::span<const float> grads) override {
    GRADSYNC_CHECK(params.size() == params_ && grads.size() == params_,
                   "zero optimizer: the full buffers, param_count() floats each");
    gather(params, param_shard);
    gather(grads, grad_shard);
    step_shards();
    scatter(param_shard, params);
  }
  std::size_t size() const override { return params_; }
  std::uint64_t steps_taken() const override { return sgd_->steps_taken(); }
  void save_state(std::span<float>) const override {
    throw Error(
        "zero: a checkpoint's momentum needs every rank's slices, and this rank holds "
        "its own only (checkpoint.every is refused for zero)");
  }
  void load_state(std::span<const float> momentum, std::uint64_t steps) override {
    GRADSYNC_CHECK(momentum.size() == params_, "zero optimizer: the full momentum buffer");
    std::vector<float> mine(layout_.shard_floats, 0.0f);
    gather(momentum, mine);
    sgd_->load_state(mine, steps);
  }

 private:
  const ShardLayout& layout_;
  std::size_t params_;
  std::unique_ptr<Optimizer> sgd_;

 public:
  // This rank's slices and the tails of the parameters, and their averaged gradient after the
  // reduce-scatters: model state of this rank's own, counted as such.
  TrackedBuffer<float> param_shard;
  TrackedBuffer<float> grad_shard;
};

// A unit's reduce-scatter (and its tail's all-reduce) in flight.
struct ZeroStrategy::InFlight {
  std::size_t unit = 0;
  std::vector<std::shared_ptr<Work>> works;
  std::function<void()> then;  // after the works: a compression's decoding
  Clock::time_point issued;
};

ZeroStrategy::ZeroStrategy(std::shared_ptr<Communicator> comm, ZeroStrategyOptions options)
    : comm_(std::move(comm)), options_(std::move(options)) {
  GRADSYNC_CHECK(comm_ != nullptr, "zero needs a communicator");
  if (options_.stage < 1 || options_.stage > 3) {
    throw ConfigError("strategy", "zero.stage",
                      "must be 1, 2 or 3, got " + std::to_string(options_.stage));
  }
  if (options_.stage == 3) {
    GRADSYNC_CHECK(!options_.layers.empty(),
                   "zero stage 3 needs the model's layers (Model::layer_spans())");
    if (options_.compression.method != "none") {
      throw ConfigError("strategy", "comm.compression",
                        "zero stage 3 reduce-scatters each layer in fp32: compression none only");
    }
  }
  // Stage 2 on the layer storage too where the model offers it and the reduce-scatter is
  // fp32 (a compression codes the units of the model's own buffer: unit_compression.h).
  const bool layered = options_.stage == 3 || (options_.stage == 2 && !options_.layers.empty() &&
                                                options_.compression.method == "none");
  if (layered) {
    // One unit per layer (a unit closes at every tensor of at least one byte): what is
    // gathered before a layer runs and reduced after its backward.
    std::vector<TensorShape> layers;
    for (const LayerSpan& l : options_.layers) layers.push_back({l.begin, l.size(), 1});
    layout_ = shard_layout(layers, options_.params, comm_->size(), 1, comm_->rank());
  } else {
    layout_ = shard_layout(options_.tensors, options_.params, comm_->size(), options_.unit_bytes,
                           comm_->rank());
  }
  if (options_.compression.method != "none") {
    compression_ = std::make_unique<UnitCompression>(comm_, layout_, options_.compression);
  }
  // Made here, not at init(): stage 3's storage fills the parameter shard before init().
  optimizer_ = std::make_unique<ShardedOptimizer>(layout_, options_.params, options_.sgd);
  if (layered) {
    layer_shards_ = std::make_unique<LayerShards>(comm_, layout_, optimizer_->param_shard,
                                                  optimizer_->grad_shard, options_.stage == 3);
  }
  steps_ = options_.first_step;
}

LayerStorage* ZeroStrategy::layer_storage() { return layer_shards_.get(); }

ZeroStrategy::~ZeroStrategy() { settle(); }

void ZeroStrategy::settle() {
  if (layer_shards_) layer_shards_->settle();
  // Only this rank's reduce-scatters in flight read buffers that are about to go.
  for (const auto& f : in_flight_) {
    for (const auto& work : f->works) {
      try {
        work->wait(comm_->timeout());
      } catch (const std::exception&) {
        // Failed: it no longer reads the buffer; timed out: the communicator's destructor ends
        // it.
      }
    }
  }
  in_flight_.clear();
}

void ZeroStrategy::abort(const std::string& reason) {
  comm_->abort(reason);
  settle();
}

Optimizer* ZeroStrategy::optimizer() { return optimizer_.get(); }

void ZeroStrategy::init(std::span<float> params) {
  if (options_.stage == 3) {
    // The shards were filled through the storage (rank 0's values, layer by layer).
    GRADSYNC_CHECK(params.empty(),
                   "zero stage 3: the model must run on layer_storage(), holding no full buffer");
  } else {
    GRADSYNC_CHECK(params.size() == options_.params,
                   "zero: the model's parameter count changed");
    comm_->broadcast(params, 0);
    optimizer_->gather(params, optimizer_->param_shard);
  }
  if (!buffers_.empty()) comm_->broadcast(buffers_, 0);  // module state, as DDP's at start
  counted_ = comm_->counters();
  if (layer_shards_) layer_shards_->take_read_counters();
}

void ZeroStrategy::reduce_scatter_unit(std::span<const float> grads, std::size_t u, bool blocking) {
  const ShardUnit& unit = layout_.units[u];
  auto f = std::make_unique<InFlight>();
  f->unit = u;
  f->issued = Clock::now();
  // Straight from the model's buffer: N equal slices, then the tail every rank keeps.
  float* shard = optimizer_->grad_shard.data() + unit.shard_offset;
  const auto sliced = grads.subspan(unit.begin, unit.sliced());
  const auto tail = grads.subspan(unit.tail_begin(), unit.tail());
  const std::span<float> slice_out(shard, unit.slice), tail_out(shard + unit.slice, unit.tail());
  if (compression_ && steps_ >= options_.compression.start_step) {
    UnitCompression::Started started =
        compression_->start(grads, u, std::span<float>(shard, unit.slice + unit.tail()));
    f->works = std::move(started.works);
    f->then = std::move(started.then);
    if (blocking) {
      for (const auto& work : f->works) work->wait(comm_->timeout());
      f->then();
    }
  } else if (blocking) {
    if (unit.slice > 0) comm_->reduce_scatter(sliced, slice_out, ReduceOp::kAvg);
    if (unit.tail() > 0) comm_->allreduce_into(tail, tail_out, ReduceOp::kAvg);
  } else {
    if (unit.slice > 0) {
      f->works.push_back(comm_->reduce_scatter_async(sliced, slice_out, ReduceOp::kAvg));
    }
    if (unit.tail() > 0) {
      f->works.push_back(comm_->allreduce_into_async(tail, tail_out, ReduceOp::kAvg));
    }
  }
  TraceSpan span{"reduce_scatter", -1, f->issued, blocking ? Clock::now() : f->issued};
  span.bytes = unit.floats() * sizeof(float);
  span.index = static_cast<int>(u);
  spans_.push_back(span);
  if (!blocking) in_flight_.push_back(std::move(f));
}

void ZeroStrategy::gradient_ready(std::span<float> grads, std::size_t begin, std::size_t end) {
  // Stage 1 reduces once backward is done; the layer storage has its gradients already.
  if (options_.stage < 2 || layer_shards_) return;
  if (!step_started_) {
    step_started_ = true;
    next_unit_ = 0;
    ready_from_ = grads.size();
    spans_.clear();
  }
  GRADSYNC_CHECK(end == ready_from_ && begin < end,
                 "gradient ranges must arrive contiguous, from the end of the buffer");
  ready_from_ = begin;
  while (next_unit_ < layout_.units.size() && layout_.units[next_unit_].begin >= ready_from_) {
    reduce_scatter_unit(grads, next_unit_++, false);
  }
}

void ZeroStrategy::synchronize_layers(std::span<float> grads, std::span<float> params) {
  GRADSYNC_CHECK(grads.empty(),
                 "zero: the model must hand its gradients to layer_storage(), not its own buffer");
  Stopwatch exposed;
  layer_shards_->finish_gradients();
  spans_ = layer_shards_->take_spans();
  const double reduce_s = exposed.seconds();
  Stopwatch update;
  optimizer_->step_shards();
  const double update_s = update.seconds();
  // Stage 2: the model's full parameters gathered as at stage 1; stage 3 gathers nothing here,
  // the next forward gathers each layer as it runs.
  const double gather_s = options_.stage == 2 ? gather_params(params) : 0.0;
  if (options_.broadcast_buffers && !buffers_.empty()) comm_->broadcast(buffers_, 0);
  finish_stats(reduce_s + gather_s, update_s);
}

void ZeroStrategy::finish_stats(double communicate_s, double update_s) {
  stats_ = StepStats{};
  stats_.communicate_s = communicate_s;
  stats_.compute_s = update_s;
  const CommCounters now = comm_->counters();
  stats_.bytes_sent = now.bytes_sent - counted_.bytes_sent;
  stats_.bytes_received = now.bytes_received - counted_.bytes_received;
  stats_.collectives = now.collectives - counted_.collectives;
  if (layer_shards_) {
    // An evaluation's gathers (or a read of the full parameters) since the last step are not
    // this step's traffic.
    const CommCounters read = layer_shards_->take_read_counters();
    stats_.bytes_sent -= read.bytes_sent;
    stats_.bytes_received -= read.bytes_received;
    stats_.collectives -= read.collectives;
  }
  counted_ = now;
  ++steps_;
}

void ZeroStrategy::synchronize(std::span<float> grads, std::span<float> params) {
  if (layer_shards_) return synchronize_layers(grads, params);
  Stopwatch exposed;
  if (!step_started_) {
    next_unit_ = 0;
    spans_.clear();
  }
  // What backward has not reduced yet (all of it at stage 1, one unit after the other), the
  // step's last unit on this thread.
  while (next_unit_ < layout_.units.size()) {
    const bool last = next_unit_ + 1 == layout_.units.size();
    reduce_scatter_unit(grads, next_unit_++, options_.stage == 1 || last);
  }
  for (const auto& f : in_flight_) {
    WorkTimes times{f->issued, {}};
    for (const auto& work : f->works) {
      work->wait(comm_->timeout());
      const WorkTimes t = work->times();
      if (t.known()) times = WorkTimes{std::min(times.started, t.started), t.finished};
    }
    if (f->then) f->then();
    for (TraceSpan& span : spans_) {
      if (span.index == static_cast<int>(f->unit) &&
          std::string_view(span.name) == "reduce_scatter") {
        span.begin = times.started;
        span.end = times.known() ? times.finished : Clock::now();
      }
    }
  }
  in_flight_.clear();
  step_started_ = false;
  const double reduce_s = exposed.seconds();

  Stopwatch update;
  optimizer_->step_shards();
  const double update_s = update.seconds();

  const double gather_s = gather_params(params);
  // Each rank normalised with its own batch statistics; rank 0's running ones go to all.
  if (options_.broadcast_buffers && !buffers_.empty()) comm_->broadcast(buffers_, 0);

  finish_stats(reduce_s + gather_s, update_s);
}

double ZeroStrategy::gather_params(std::span<float> params) {
  // Every unit's slices gathered straight into the model's buffer; the tails, which every rank
  // stepped alike, copied back.
  Stopwatch gather;
  for (std::size_t u = 0; u < layout_.units.size(); ++u) {
    const ShardUnit& unit = layout_.units[u];
    const Clock::time_point begin = Clock::now();
    const float* shard = optimizer_->param_shard.data() + unit.shard_offset;
    if (unit.slice > 0) {
      comm_->allgather(std::span<const float>(shard, unit.slice),
                       params.subspan(unit.begin, unit.sliced()));
    }
    std::copy_n(shard + unit.slice, unit.tail(),
                params.begin() + std::ptrdiff_t(unit.tail_begin()));
    TraceSpan span{"allgather", -1, begin, Clock::now()};
    span.bytes = unit.sliced() * sizeof(float);
    span.index = static_cast<int>(u);
    spans_.push_back(span);
  }
  return gather.seconds();
}

std::optional<SyncStrategy::OwnParts> ZeroStrategy::own_checkpoint_parts(
    std::span<const float> /*params*/) const {
  GRADSYNC_CHECK(optimizer_ != nullptr, "zero: a checkpoint before init()");
  const std::vector<float> momentum = optimizer_->shard_momentum();
  // The parameter shard: after a step it holds what the all-gather copied into every rank's
  // buffer (stages 1 and 2), and at stage 3 it is all there is.
  const std::span<const float> shard = optimizer_->param_shard.span();
  OwnParts own;
  const auto add = [&](bool mine, std::size_t begin, std::size_t n, std::size_t at) {
    const int index = own.parts++;
    if (!mine) return;
    CheckpointPart part;
    part.total = options_.params;
    part.begin = begin;
    part.end = begin + n;
    part.optimizer_steps = optimizer_->steps_taken();
    part.params.assign(shard.begin() + std::ptrdiff_t(at), shard.begin() + std::ptrdiff_t(at + n));
    part.momentum.assign(momentum.begin() + std::ptrdiff_t(at),
                         momentum.begin() + std::ptrdiff_t(at + n));
    own.mine.emplace_back(index, std::move(part));
  };
  // The units lie last first: walk them from the buffer's start, so the parts tile it in order.
  for (auto unit = layout_.units.rbegin(); unit != layout_.units.rend(); ++unit) {
    for (int r = 0; unit->slice > 0 && r < layout_.ranks; ++r) {
      add(r == layout_.rank, unit->slice_begin(r), unit->slice, unit->shard_offset);
    }
    if (unit->tail() > 0) {
      add(layout_.rank == 0, unit->tail_begin(), unit->tail(), unit->shard_offset + unit->slice);
    }
  }
  return own;
}

}  // namespace gradsync
