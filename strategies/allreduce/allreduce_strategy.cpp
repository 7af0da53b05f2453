#include "strategies/allreduce/allreduce_strategy.h"

#include <algorithm>

#include "common/error.h"
#include "common/stopwatch.h"
#include "model/make_optimizer.h"
#include "strategies/allreduce/reducer_work.h"

namespace gradsync {
AllreduceStrategy::AllreduceStrategy(std::shared_ptr<Communicator> comm,
                                     const AllreduceStrategyOptions& options)
    : comm_(std::move(comm)), options_(options) {
  GRADSYNC_CHECK(comm_ != nullptr, "allreduce needs a communicator");
  GRADSYNC_CHECK(options_.bucket_bytes > 0, "bucket size must be positive");
  if (options_.compression.method != "none") {
    // Join sums what the active ranks contributed and divides after; the compressions average
    // in their own way (fp16 divides before its sum): preset_checks.cpp refuses the pair.
    GRADSYNC_CHECK(!options_.join_uneven, "comm.compression with comm.uneven_inputs");
    GRADSYNC_CHECK(options_.device < 0, "comm.compression runs on models in host memory");
  }
  if (options_.compression.method == "topk" && options_.sgd.momentum > 0) {
    // DGC's momentum correction: the momentum (and the weight decay, which torch's SGD puts
    // through it) happen on each rank before selection; the update after is plain SGD.
    options_.compression.local_momentum = options_.sgd.momentum;
    local_weight_decay_ = static_cast<float>(options_.sgd.weight_decay);
    options_.sgd.momentum = 0;
    options_.sgd.weight_decay = 0;
  }
  reducer_ = make_bucket_reducer(comm_, options_.compression);
  buffer_staging_ = BufferStaging(options_.device);
  steps_ = options_.first_step;
}

AllreduceStrategy::~AllreduceStrategy() { settle(); }

void AllreduceStrategy::abort(const std::string& reason) {
  // The peers hear why (not only that this rank's connections closed), and this rank's
  // in-flight bucket reductions fail at once instead of at their timeout.
  comm_->abort(reason);
  settle();
}

void AllreduceStrategy::settle() {
  // Only this rank's in-flight bucket reductions need settling, so that no one writes into a
  // buffer about to go away.
  for (const auto& work : in_flight_) {
    try {
      work->wait(comm_->timeout());
    } catch (const std::exception&) {
      // Failed: it no longer touches the buffer. Timed out: the communicator's destructor,
      // which runs before the model's buffers go (see worker_process.cpp), ends it.
    }
  }
  in_flight_.clear();
  issued_at_.clear();
  deferred_.clear();
}

void AllreduceStrategy::init(std::span<float> params) {
  // DDP broadcasts module state from rank 0 at construction: replicas start equal even if
  // their initialisation differed.
  comm_->broadcast(params, 0);
  params_ = params;
  // DDP's module state includes the buffers, whatever broadcast_buffers says.
  if (!buffers_.empty()) {
    comm_->broadcast(buffer_staging_.upload(buffers_), 0);
    buffer_staging_.download(buffers_);
  }
  sgd_ = make_sgd(params.size(), options_.sgd, options_.device);
  counted_ = comm_->counters();
}

void AllreduceStrategy::gradient_ready(std::span<float> grads, std::size_t begin, std::size_t end) {
  if (!step_started_) {
    step_started_ = true;
    pending_begin_ = pending_end_ = grads.size();
    issued_ranges_.clear();
    spans_.clear();
  }
  // Ranges must arrive back to front and contiguous: that is what lets a bucket be one range.
  GRADSYNC_CHECK(end == pending_begin_ && begin < end,
                 "gradient ranges must arrive contiguous, from the end of the buffer");
  pending_begin_ = begin;
  if ((pending_end_ - pending_begin_) * sizeof(float) >= options_.bucket_bytes) close_bucket(grads);
}

void AllreduceStrategy::close_bucket(std::span<float> grads, bool last) {
  const std::pair<std::size_t, std::size_t> range{pending_begin_, pending_end_};
  pending_end_ = pending_begin_;
  if (range.first == range.second) return;
  issued_ranges_.push_back(range);
  if (options_.overlap) {
    issue(grads.subspan(range.first, range.second - range.first), range.first, last);
  } else {
    deferred_.push_back(range);
  }
}

void AllreduceStrategy::issue(std::span<float> bucket, std::size_t offset, bool last) {
  issued_at_.push_back(Clock::now());
  if (local_weight_decay_ != 0) {
    // d = g + wd p, as torch's SGD forms it before its momentum: here, before the velocity.
    for (std::size_t i = 0; i < bucket.size(); ++i) {
      bucket[i] += local_weight_decay_ * params_[offset + i];
    }
  }
  // The step waits for its last bucket anyway: a blocking start lets a backend with a thread of
  // its own run it on this thread when nothing is queued before it (tcp, shm, gloo).
  if (!options_.join_uneven) {
    in_flight_.push_back(reducer_->start(bucket, offset, steps_, last));
    return;
  }
  // Join: summed, and divided by the ranks that trained once the step's flags are in.
  in_flight_.push_back(run_or_issue(
      last, [&] { return comm_->allreduce_async(bucket, ReduceOp::kSum); },
      [&] { comm_->allreduce(bucket, ReduceOp::kSum); }));
}

void AllreduceStrategy::synchronize(std::span<float> grads, std::span<float> params) {
  Stopwatch exposed;
  if (!step_started_) {
    // No gradient_ready calls (a model without the hook): the whole buffer is one region.
    pending_begin_ = 0;
    pending_end_ = grads.size();
    issued_ranges_.clear();
    spans_.clear();
  }
  pending_begin_ = 0;  // whatever backward left: the first layers' gradients
  close_bucket(grads, true);
  for (std::size_t d = 0; d < deferred_.size(); ++d) {
    const auto [begin, end] = deferred_[d];
    issue(grads.subspan(begin, end - begin), begin, d + 1 == deferred_.size());
  }
  deferred_.clear();
  for (std::size_t b = 0; b < in_flight_.size(); ++b) {
    in_flight_[b]->wait(comm_->timeout());
    WorkTimes times = in_flight_[b]->times();
    if (!times.known()) times = WorkTimes{issued_at_[b], Clock::now()};
    TraceSpan span{"allreduce", -1, times.started, times.finished};
    span.bytes = (issued_ranges_[b].second - issued_ranges_[b].first) * sizeof(float);
    span.index = static_cast<int>(b);
    spans_.push_back(span);
  }
  in_flight_.clear();
  issued_at_.clear();
  step_started_ = false;
  if (options_.join_uneven) {
    // Summed, not averaged: only the ranks that still train contributed a gradient.
    const float scale = 1.0f / static_cast<float>(count_active(true));
    for (float& g : grads) g *= scale;
  }
  ++steps_;

  stats_ = StepStats{};
  // Communication that overlapped backward is hidden; what is left is the exposed part.
  stats_.communicate_s = exposed.seconds();
  Stopwatch update;
  sgd_->step(params, grads);
  stats_.compute_s = update.seconds();
  Stopwatch buffers;
  broadcast_buffers(true);
  stats_.communicate_s += buffers.seconds();
  // Counted from the previous step's end, so buckets sent during backward are included.
  const CommCounters now = comm_->counters();
  stats_.bytes_sent = now.bytes_sent - counted_.bytes_sent;
  stats_.bytes_received = now.bytes_received - counted_.bytes_received;
  stats_.collectives = now.collectives - counted_.collectives;
  counted_ = now;
}

int AllreduceStrategy::count_active(bool active) {
  float flag = active ? 1.0f : 0.0f;
  comm_->allreduce(std::span<float>(&flag, 1), ReduceOp::kSum);
  return static_cast<int>(flag + 0.5f);
}

void AllreduceStrategy::broadcast_buffers(bool active) {
  if (buffers_.empty() || !options_.broadcast_buffers) return;
  int root = 0;
  if (options_.join_uneven) {
    // DDP's _find_common_rank: the highest rank still training holds statistics that still
    // move; a rank that has joined only receives. Every rank, joined or not, takes part.
    std::vector<float> ranks(static_cast<std::size_t>(comm_->size()));
    const float mine = active ? static_cast<float>(comm_->rank()) : -1.0f;
    comm_->allgather(std::span<const float>(&mine, 1), ranks);
    root = static_cast<int>(*std::max_element(ranks.begin(), ranks.end()));
    GRADSYNC_CHECK(root >= 0, "a buffer broadcast with no rank training");
  }
  const Clock::time_point begin = Clock::now();
  comm_->broadcast(buffer_staging_.upload(buffers_), root);
  buffer_staging_.download(buffers_);
  TraceSpan span{"broadcast", -1, begin, Clock::now()};
  span.bytes = buffers_.size_bytes();
  spans_.push_back(span);
}

void AllreduceStrategy::finish(std::span<float> grads, std::span<float> params) {
  if (!options_.join_uneven || comm_->size() == 1) return;
  // Shadow the steps the other ranks still take: the same buckets, with zero gradients, in
  // the same order, then a zero flag. `last_buckets` of our own last step is the layout.
  std::fill(grads.begin(), grads.end(), 0.0f);
  std::vector<std::pair<std::size_t, std::size_t>> layout = issued_ranges_;
  if (layout.empty()) layout = {{0, grads.size()}};
  for (;;) {
    std::vector<std::shared_ptr<Work>> works;
    for (const auto& [begin, end] : layout) {
      works.push_back(comm_->allreduce_async(grads.subspan(begin, end - begin), ReduceOp::kSum));
    }
    for (const auto& work : works) work->wait(comm_->timeout());
    if (count_active(false) == 0) break;
    // The others' step ends with a buffer broadcast: this rank receives.
    broadcast_buffers(false);
    std::fill(grads.begin(), grads.end(), 0.0f);  // the others' sums landed here; not ours
  }
  // The rank that took the most steps holds the final parameters (ties: the lowest rank).
  std::vector<float> steps(static_cast<std::size_t>(comm_->size()));
  const float mine = static_cast<float>(steps_);
  comm_->allgather(std::span<const float>(&mine, 1), steps);
  const int root = static_cast<int>(std::max_element(steps.begin(), steps.end()) - steps.begin());
  comm_->broadcast(params, root);
}

}  // namespace gradsync
