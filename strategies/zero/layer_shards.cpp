#include "strategies/zero/layer_shards.h"

#include <algorithm>
#include <new>

#include "common/error.h"

namespace gradsync {
namespace {

// A layer-sized buffer, counted in the ledger while it lives. 64-byte aligned, as the Mlp's own
// buffers are aligned to the widest vector packet: the kernels then split every range into the
// same head, body and tail on every run, so equal inputs give bit-equal results wherever the
// heap put the layer. Left uninitialised: every use writes it whole first (a gather, the
// model's gradient), and a fill would cost a pass over a layer each time one is made. Its
// storage comes from and goes back to the shards' BufferPool.
class LayerBuffer {
 public:
  LayerBuffer(ModelState kind, BufferPool& pool) : counted_(kind, 0), pool_(pool) {}
  ~LayerBuffer() { pool_.give(size_, std::move(data_)); }
  LayerBuffer(const LayerBuffer&) = delete;
  LayerBuffer& operator=(const LayerBuffer&) = delete;

  void allocate(std::size_t n) {
    pool_.give(size_, std::move(data_));
    data_ = pool_.take(n);
    size_ = n;
    counted_.set(n * sizeof(float));
  }
  std::span<float> span() { return {data_.get(), size_}; }
  float* data() { return data_.get(); }

 private:
  BufferPool::Block data_;
  std::size_t size_ = 0;
  TrackedBytes counted_;
  BufferPool& pool_;
};

// The most the shards hold in use at once (layer_shards.h): stage 3 at layer l its gathered
// values and the prefetched l - 1, its gradient and l + 1's in flight; stage 2 the gradients.
std::size_t window_floats(const ShardLayout& layout, bool holds_params) {
  const std::size_t layers = layout.units.size();
  const auto n = [&](std::size_t l) {
    return l < layers ? layout.units[layers - 1 - l].floats() : std::size_t(0);  // last first
  };
  std::size_t most = 0;
  for (std::size_t l = 0; l < layers; ++l) {
    const std::size_t grads = n(l) + n(l + 1);
    const std::size_t gathered = holds_params ? n(l) + (l > 0 ? n(l - 1) : 0) : 0;
    most = std::max(most, grads + gathered);
  }
  return most;
}

}  // namespace

// A layer's parameters gathered (or being gathered) into a buffer of its own.
struct LayerShards::Gathered {
  explicit Gathered(BufferPool& pool) : values(ModelState::kParams, pool) {}
  std::size_t layer = 0;
  LayerBuffer values;
  std::shared_ptr<Work> work;  // null: complete (a layer under N floats is all tail)
  Clock::time_point issued;
};

// A layer's full gradient, then its reduce-scatter (and tail all-reduce) in flight.
struct LayerShards::Reducing {
  explicit Reducing(BufferPool& pool) : grads(ModelState::kGrads, pool) {}
  std::size_t layer = 0;
  LayerBuffer grads;
  // accumulate: the reduced slice lands here and is added to the shard once it has arrived.
  TrackedBuffer<float> staged{ModelState::kGrads};
  std::vector<std::shared_ptr<Work>> works;
  Clock::time_point issued;
};

LayerShards::LayerShards(std::shared_ptr<Communicator> comm, const ShardLayout& layout,
                         std::span<float> param_shard, std::span<float> grad_shard,
                         bool holds_params)
    : comm_(std::move(comm)),
      layout_(layout),
      param_shard_(param_shard),
      grad_shard_(grad_shard),
      holds_params_(holds_params),
      pool_(window_floats(layout, holds_params)) {
  GRADSYNC_CHECK(param_shard_.size() == layout_.shard_floats &&
                     grad_shard_.size() == layout_.shard_floats,
                 "layer shards: the shards must be the layout's size");
}

LayerShards::~LayerShards() { settle(); }

BufferPool::Block BufferPool::take(std::size_t n) {
  in_use_ += n;
  for (auto it = spare_.begin(); it != spare_.end(); ++it) {
    if (it->first == n) {
      Block block = std::move(it->second);
      spare_.erase(it);
      spare_floats_ -= n;
      return block;
    }
  }
  trim();  // room for the new block first
  return Block(static_cast<float*>(::operator new(n * sizeof(float), kAlign)));
}

void BufferPool::give(std::size_t n, Block block) {
  if (!block) return;
  in_use_ -= n;
  spare_.emplace_back(n, std::move(block));
  spare_floats_ += n;
  trim();
}

void BufferPool::trim() {
  const auto by_size = [](const auto& a, const auto& b) { return a.first < b.first; };
  while (!spare_.empty() && in_use_ + spare_floats_ > budget_) {
    const auto smallest = std::min_element(spare_.begin(), spare_.end(), by_size);
    spare_floats_ -= smallest->first;
    spare_.erase(smallest);
  }
}

const ShardUnit& LayerShards::unit(std::size_t layer) const {
  GRADSYNC_CHECK(layer < layout_.units.size(), "layer shards: no such layer");
  return layout_.units[layout_.units.size() - 1 - layer];  // units lie last layer first
}

std::unique_ptr<LayerShards::Gathered> LayerShards::start_gather(std::size_t layer) {
  const ShardUnit& u = unit(layer);
  auto g = std::make_unique<Gathered>(pool_);
  g->layer = layer;
  g->issued = Clock::now();
  g->values.allocate(u.floats());
  const float* mine = param_shard_.data() + u.shard_offset;
  // The slices, every rank's in rank order, are the layer's first N·slice floats; the tail,
  // which every rank holds alike, follows.
  if (u.slice > 0) {
    g->work = comm_->allgather_async(std::span<const float>(mine, u.slice),
                                     g->values.span().subspan(0, u.sliced()));
  }
  std::copy_n(mine + u.slice, u.tail(), g->values.data() + u.sliced());
  return g;
}

void LayerShards::finish_gather(Gathered& g) {
  if (!g.work) return;
  g.work->wait(comm_->timeout());
  const WorkTimes t = g.work->times();
  TraceSpan span{"allgather", -1, t.known() ? t.started : g.issued,
                 t.known() ? t.finished : Clock::now()};
  span.bytes = unit(g.layer).sliced() * sizeof(float);
  span.index = static_cast<int>(g.layer);
  spans_.push_back(span);
  g.work.reset();
}

std::span<const float> LayerShards::acquire_params(std::size_t layer, LayerPass pass) {
  GRADSYNC_CHECK(holds_params_, "layer shards: stage 2's storage holds no parameters");
  GRADSYNC_CHECK(current_ == nullptr, "layer shards: one layer acquired at a time");
  // A read pass begins at layer 0 and ends at the last layer's release; its bytes are counted
  // apart (a training step never acquires with kRead).
  if (pass == LayerPass::kRead && layer == 0) read_from_ = comm_->counters();
  if (prefetched_ && prefetched_->layer == layer) {
    current_ = std::move(prefetched_);
  } else {
    // Not the layer foreseen (every rank alike): the prefetch is finished and dropped.
    if (prefetched_) finish_gather(*prefetched_);
    prefetched_.reset();
    current_ = start_gather(layer);
  }
  finish_gather(*current_);
  const std::size_t layers = layout_.units.size();
  if (pass == LayerPass::kBackward && layer > 0) {
    prefetched_ = start_gather(layer - 1);
  } else if (pass != LayerPass::kBackward && layer + 1 < layers) {
    prefetched_ = start_gather(layer + 1);
  }
  return current_->values.span();
}

void LayerShards::release_params(std::size_t layer) {
  GRADSYNC_CHECK(current_ != nullptr && current_->layer == layer,
                 "layer shards: release the layer acquired");
  current_.reset();  // its values freed: what stage 3 saves
  if (read_from_ && layer + 1 == layout_.units.size()) {
    const CommCounters now = comm_->counters();
    read_.bytes_sent += now.bytes_sent - read_from_->bytes_sent;
    read_.bytes_received += now.bytes_received - read_from_->bytes_received;
    read_.collectives += now.collectives - read_from_->collectives;
    read_from_.reset();
  }
}

void LayerShards::store_params(std::size_t layer, std::span<const float> values) {
  GRADSYNC_CHECK(holds_params_, "layer shards: stage 2's storage holds no parameters");
  const ShardUnit& u = unit(layer);
  GRADSYNC_CHECK(values.size() == u.floats(), "layer shards: a layer's values, all of them");
  // Rank 0's values on every rank, as stages 1 and 2 broadcast the whole buffer at init.
  TrackedBuffer<float> copy(ModelState::kParams, u.floats());
  std::copy(values.begin(), values.end(), copy.begin());
  comm_->broadcast(copy.span(), 0);
  std::copy_n(copy.begin() + std::ptrdiff_t(u.slice * std::size_t(layout_.rank)), u.slice,
              param_shard_.begin() + std::ptrdiff_t(u.shard_offset));
  std::copy_n(copy.begin() + std::ptrdiff_t(u.sliced()), u.tail(),
              param_shard_.begin() + std::ptrdiff_t(u.shard_offset + u.slice));
}

std::span<float> LayerShards::layer_grads(std::size_t layer) {
  GRADSYNC_CHECK(computing_ == nullptr, "layer shards: one layer's gradient at a time");
  computing_ = std::make_unique<Reducing>(pool_);
  computing_->layer = layer;
  computing_->grads.allocate(unit(layer).floats());
  return computing_->grads.span();
}

void LayerShards::gradient_final(std::size_t layer, bool accumulate) {
  GRADSYNC_CHECK(computing_ != nullptr && computing_->layer == layer,
                 "layer shards: gradient_final for the layer whose gradient was handed out");
  finish_reduce();  // the layer before: its full gradient freed before this one's is sent
  Reducing& r = *computing_;
  const ShardUnit& u = unit(layer);
  float* out = grad_shard_.data() + u.shard_offset;
  if (accumulate) {
    r.staged.resize(u.slice + u.tail());
    out = r.staged.data();
  }
  r.issued = Clock::now();
  const std::span<const float> grads = r.grads.span();
  if (u.slice > 0) {
    r.works.push_back(comm_->reduce_scatter_async(grads.subspan(0, u.sliced()),
                                                  std::span<float>(out, u.slice), ReduceOp::kAvg));
  }
  if (u.tail() > 0) {
    r.works.push_back(comm_->allreduce_into_async(
        grads.subspan(u.sliced(), u.tail()), std::span<float>(out + u.slice, u.tail()),
        ReduceOp::kAvg));
  }
  reducing_ = std::move(computing_);
}

void LayerShards::finish_reduce() {
  if (!reducing_) return;
  Reducing& r = *reducing_;
  WorkTimes times{r.issued, {}};
  for (const auto& work : r.works) {
    work->wait(comm_->timeout());
    const WorkTimes t = work->times();
    if (t.known()) times = WorkTimes{std::min(times.started, t.started), t.finished};
  }
  if (!r.staged.empty()) {
    // A later micro-batch: its average added to the earlier ones', as `single` adds the
    // micro-batches' gradients in its buffer.
    const ShardUnit& u = unit(r.layer);
    float* shard = grad_shard_.data() + u.shard_offset;
    for (std::size_t i = 0; i < r.staged.size(); ++i) shard[i] += r.staged[i];
  }
  TraceSpan span{"reduce_scatter", -1, times.started, times.known() ? times.finished : Clock::now()};
  span.bytes = unit(r.layer).floats() * sizeof(float);
  span.index = static_cast<int>(r.layer);
  spans_.push_back(span);
  reducing_.reset();  // the layer's full gradient freed
}

void LayerShards::finish_gradients() {
  GRADSYNC_CHECK(computing_ == nullptr && current_ == nullptr && prefetched_ == nullptr,
                 "layer shards: a step ends with every layer released and reported");
  finish_reduce();
}

void LayerShards::settle() noexcept {
  const auto wait = [&](const std::shared_ptr<Work>& work) {
    try {
      if (work) work->wait(comm_->timeout());
    } catch (const std::exception&) {
      // Failed: it no longer touches the buffer; timed out: the communicator's end ends it.
    }
  };
  if (current_) wait(current_->work);
  if (prefetched_) wait(prefetched_->work);
  if (reducing_) {
    for (const auto& work : reducing_->works) wait(work);
  }
  current_.reset();
  prefetched_.reset();
  reducing_.reset();
  computing_.reset();
}

std::vector<TraceSpan> LayerShards::take_spans() { return std::exchange(spans_, {}); }

CommCounters LayerShards::take_read_counters() { return std::exchange(read_, {}); }

}  // namespace gradsync
