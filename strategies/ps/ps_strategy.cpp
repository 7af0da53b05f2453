#include "strategies/ps/ps_strategy.h"

#include "common/stopwatch.h"

namespace gradsync {

PsStrategy::PsStrategy(const PsClientOptions& options, std::uint64_t first_step)
    : options_(options), rank_(options.rank), step_(first_step) {}

PsStrategy::~PsStrategy() = default;

void PsStrategy::init(std::span<float> params) {
  options_.model_size = params.size();
  // The handshake happens here, once the model size is known, not at construction.
  client_ = std::make_unique<PsClient>(options_);
  // The shards hold no parameters until rank 0 sends its own; the others then take those. A
  // resumed run's shards start from the checkpoint: everyone pulls.
  const bool sends_initial = rank_ == 0 && step_ == 0;
  client_->wait(sends_initial ? client_->init(params) : client_->pull(params));
}

void PsStrategy::synchronize(std::span<float> grads, std::span<float> params) {
  Stopwatch round_trip;
  const PushPullStats result = client_->wait(client_->push_pull(step_, grads, params));
  spans_.clear();
  for (std::size_t k = 0; k < result.answered.size(); ++k) {
    TraceSpan span{"push_pull", static_cast<std::int64_t>(step_), result.issued,
                   result.answered[k]};
    span.index = static_cast<int>(k);
    span.flow_out = trace_flow_id(rank_, static_cast<int>(k), static_cast<std::int64_t>(step_));
    spans_.push_back(span);
  }
  ++step_;
  stats_ = StepStats{};
  // The worker cannot tell server time from network time: the whole round trip is
  // communication (in sync mode it includes waiting for the slowest worker's push).
  stats_.communicate_s = round_trip.seconds();
  stats_.bytes_sent = result.bytes_sent;
  stats_.bytes_received = result.bytes_received;
  stats_.staleness = result.max_staleness;
}

}  // namespace gradsync
