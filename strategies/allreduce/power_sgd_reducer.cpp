// comm.compression: powersgd (bucket_reducer.h). Two rounds a bucket: the first (P of every
// matrix, and the bucket's 1-D tensors uncompressed) issued as soon as backward fills the
// bucket, the second (Q) when the step waits for it.
#include "strategies/allreduce/power_sgd_reducer.h"

#include <algorithm>
#include <map>
#include <vector>

#include "common/compression/power_sgd_codec.h"
#include "common/error.h"
#include "strategies/allreduce/reducer_work.h"

namespace gradsync {
namespace {

using compression::PowerSgdCodec;

struct Matrix {
  std::size_t at = 0;  // offset in the bucket
  PowerSgdCodec codec;
  std::span<float> p, q;  // the codec's own, between the rounds
};

struct Range {
  std::size_t at = 0, size = 0;  // in the bucket
};

// One bucket's matrices and 1-D ranges, and the buffers its two rounds reduce.
struct BucketState {
  std::size_t size = 0;  // the bucket's floats
  std::vector<Matrix> matrices;
  std::vector<Range> vectors;
  std::vector<float> first;   // every matrix's P, then every 1-D range
  std::vector<float> second;  // every matrix's Q
};

class PowerSgdReducer final : public BucketReducer {
 public:
  PowerSgdReducer(std::shared_ptr<Communicator> comm, const CompressionOptions& options)
      : comm_(std::move(comm)), options_(options) {}

  std::shared_ptr<Work> start(std::span<float> bucket, std::size_t offset, std::int64_t,
                              bool blocking) override {
    BucketState& state = state_for(bucket.size(), offset);
    std::size_t at = 0;
    for (Matrix& m : state.matrices) {
      m.p = m.codec.compute_p(bucket.subspan(m.at, m.codec.rows() * m.codec.cols()));
      std::copy(m.p.begin(), m.p.end(), state.first.begin() + std::ptrdiff_t(at));
      at += m.p.size();
    }
    for (const Range& v : state.vectors) {
      std::copy_n(bucket.begin() + std::ptrdiff_t(v.at), v.size,
                  state.first.begin() + std::ptrdiff_t(at));
      at += v.size;
    }
    const auto finish = [this, bucket, &state] { second_round(bucket, state); };
    std::span<float> first = state.first;
    std::shared_ptr<Work> work = run_or_issue(
        blocking, [&] { return comm_->allreduce_async(first, ReduceOp::kAvg); },
        [&] { comm_->allreduce(first, ReduceOp::kAvg); });
    return std::make_shared<ThenWork>(std::move(work), finish);
  }

 private:
  BucketState& state_for(std::size_t size, std::size_t offset) {
    auto [it, added] = states_.try_emplace(offset);
    BucketState& state = it->second;
    if (!added) {
      GRADSYNC_CHECK(state.size == size, "powersgd: a bucket's layout changed between steps");
      return state;
    }
    state.size = size;
    // The model's tensors within the bucket: matrices compressed, the rest (and anything a
    // tensor boundary would split) sent as it is.
    std::size_t covered = offset;
    std::size_t p_floats = 0, q_floats = 0, plain = 0;
    const std::size_t end = offset + size;
    const auto add_plain = [&](std::size_t from, std::size_t to) {
      if (to > from) state.vectors.push_back({from - offset, to - from}), plain += to - from;
    };
    for (const TensorShape& t : options_.tensors) {
      if (t.end() <= offset || t.offset >= end) continue;
      if (!t.matrix() || t.offset < offset || t.end() > end) continue;
      add_plain(covered, t.offset);
      // The same seed for the same matrix on every rank: their Q start equal.
      Matrix m{t.offset - offset,
               PowerSgdCodec(t.rows, t.cols, std::size_t(options_.powersgd_rank),
                             options_.seed ^ (0x9E3779B97F4A7C15ull * (t.offset + 1))),
               {},
               {}};
      p_floats += m.codec.rows() * m.codec.rank();
      q_floats += m.codec.cols() * m.codec.rank();
      state.matrices.push_back(std::move(m));
      covered = t.end();
    }
    add_plain(covered, end);
    state.first.resize(p_floats + plain);
    state.second.resize(q_floats);
    return state;
  }

  // After P's all-reduce: the 1-D ranges back, each P orthonormalized, Q = M^T P reduced, and
  // each matrix replaced by P Q^T.
  void second_round(std::span<float> bucket, BucketState& state) {
    std::size_t at = 0;
    for (Matrix& m : state.matrices) {
      std::copy_n(state.first.begin() + std::ptrdiff_t(at), m.p.size(), m.p.begin());
      at += m.p.size();
    }
    for (const Range& v : state.vectors) {
      std::copy_n(state.first.begin() + std::ptrdiff_t(at), v.size,
                  bucket.begin() + std::ptrdiff_t(v.at));
      at += v.size;
    }
    if (state.matrices.empty()) return;
    at = 0;
    for (Matrix& m : state.matrices) {
      m.codec.orthonormalize_p();
      m.q = m.codec.compute_q(bucket.subspan(m.at, m.codec.rows() * m.codec.cols()));
      std::copy(m.q.begin(), m.q.end(), state.second.begin() + std::ptrdiff_t(at));
      at += m.q.size();
    }
    comm_->allreduce(state.second, ReduceOp::kAvg);
    at = 0;
    for (Matrix& m : state.matrices) {
      std::copy_n(state.second.begin() + std::ptrdiff_t(at), m.q.size(), m.q.begin());
      at += m.q.size();
      m.codec.decompress(bucket.subspan(m.at, m.codec.rows() * m.codec.cols()));
    }
  }

  std::shared_ptr<Communicator> comm_;
  CompressionOptions options_;
  std::map<std::size_t, BucketState> states_;  // by the bucket's offset
};

}  // namespace

std::unique_ptr<BucketReducer> make_power_sgd_reducer(std::shared_ptr<Communicator> comm,
                                                      const CompressionOptions& options) {
  GRADSYNC_CHECK(options.powersgd_rank >= 1, "powersgd: rank must be at least 1");
  return std::make_unique<PowerSgdReducer>(std::move(comm), options);
}

}  // namespace gradsync
