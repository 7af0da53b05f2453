// comm.compression: fp16, bf16 (bucket_reducer.h): each value divided by N in fp32 and rounded
// to 16 bits once, the 16-bit values summed by the communicator (allreduce_half), the sum
// decoded into the bucket: the average, at 16-bit precision, in half the bytes.
#include "strategies/allreduce/half_reducer.h"

#include <map>
#include <vector>

#include "common/compression/half_codec.h"
#include "strategies/allreduce/reducer_work.h"

namespace gradsync {
namespace {

class HalfReducer final : public BucketReducer {
 public:
  HalfReducer(std::shared_ptr<Communicator> comm, HalfType type)
      : comm_(std::move(comm)), type_(type) {}

  std::shared_ptr<Work> start(std::span<float> bucket, std::size_t offset, std::int64_t,
                              bool blocking) override {
    std::vector<std::uint16_t>& wire = wire_[offset];
    wire.resize(bucket.size());
    // Divided before the sum, as DDP's hooks do, so that N large values cannot overflow fp16.
    const float n = static_cast<float>(comm_->size());
    compression::encode_half(type_, bucket, wire, n);
    std::span<std::uint16_t> data = wire;
    std::shared_ptr<Work> work = run_or_issue(
        blocking, [&] { return comm_->allreduce_half_async(data, type_, ReduceOp::kSum); },
        [&] { comm_->allreduce_half(data, type_, ReduceOp::kSum); });
    return std::make_shared<ThenWork>(
        std::move(work), [this, bucket, data] { compression::decode_half(type_, data, bucket); });
  }

 private:
  std::shared_ptr<Communicator> comm_;
  HalfType type_;
  std::map<std::size_t, std::vector<std::uint16_t>> wire_;  // by the bucket's offset
};

}  // namespace

std::unique_ptr<BucketReducer> make_half_reducer(std::shared_ptr<Communicator> comm,
                                                 const CompressionOptions& options) {
  return std::make_unique<HalfReducer>(
      std::move(comm), options.method == "fp16" ? HalfType::kFp16 : HalfType::kBf16);
}

}  // namespace gradsync
