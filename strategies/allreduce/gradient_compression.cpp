#include "strategies/allreduce/gradient_compression.h"

#include <algorithm>

#include "common/error.h"
#include "strategies/allreduce/half_reducer.h"
#include "strategies/allreduce/power_sgd_reducer.h"
#include "strategies/allreduce/reducer_work.h"
#include "strategies/allreduce/top_k_reducer.h"

namespace gradsync {

namespace {

class PlainReducer final : public BucketReducer {
 public:
  explicit PlainReducer(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {}
  std::shared_ptr<Work> start(std::span<float> bucket, std::size_t, std::int64_t,
                              bool blocking) override {
    // The blocking form lets a backend with a thread of its own run the step's last bucket on
    // this thread when nothing is queued before it (tcp, shm, gloo): two hand-offs saved.
    return run_or_issue(
        blocking, [&] { return comm_->allreduce_async(bucket, ReduceOp::kAvg); },
        [&] { comm_->allreduce(bucket, ReduceOp::kAvg); });
  }

 private:
  std::shared_ptr<Communicator> comm_;
};

// Uncompressed before `start`, then the method's reducer.
class WarmUpReducer final : public BucketReducer {
 public:
  WarmUpReducer(std::unique_ptr<BucketReducer> plain, std::unique_ptr<BucketReducer> compressed,
                std::int64_t start)
      : plain_(std::move(plain)), compressed_(std::move(compressed)), start_(start) {}
  std::shared_ptr<Work> start(std::span<float> bucket, std::size_t offset, std::int64_t step,
                              bool blocking) override {
    BucketReducer& reducer = step < start_ ? *plain_ : *compressed_;
    return reducer.start(bucket, offset, step, blocking);
  }

 private:
  std::unique_ptr<BucketReducer> plain_, compressed_;
  std::int64_t start_;
};

std::unique_ptr<BucketReducer> make_compressed(std::shared_ptr<Communicator> comm,
                                               const CompressionOptions& options) {
  if (options.method == "powersgd") return make_power_sgd_reducer(std::move(comm), options);
  if (options.method == "fp16" || options.method == "bf16") {
    return make_half_reducer(std::move(comm), options);
  }
  if (options.method == "topk") return make_top_k_reducer(std::move(comm), options);
  return nullptr;
}

}  // namespace

std::unique_ptr<BucketReducer> make_bucket_reducer(std::shared_ptr<Communicator> comm,
                                                   const CompressionOptions& options) {
  if (options.method == "none") return std::make_unique<PlainReducer>(std::move(comm));
  if (std::unique_ptr<BucketReducer> compressed = make_compressed(comm, options)) {
    // topk with local momentum runs its own warm-up: its velocity starts with the first step.
    const bool own_warm_up = options.method == "topk" && options.local_momentum > 0;
    if (options.start_step <= 0 || own_warm_up) return compressed;
    return std::make_unique<WarmUpReducer>(std::make_unique<PlainReducer>(std::move(comm)),
                                           std::move(compressed), options.start_step);
  }
  throw ConfigError("comm", "comm.compression",
                    "unknown method '" + options.method +
                        "' (valid: none, fp16, bf16, powersgd, "
                        "topk)");
}

}  // namespace gradsync
