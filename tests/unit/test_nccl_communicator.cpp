// NcclCommunicator on device buffers: allreduce, broadcast, allgather and reduce-scatter are
// exact on integer-valued inputs (the sums are exact in float in any order), for world size 1
// and, where there are more GPUs, one rank per GPU as threads. Every case skips without a GPU.
#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "allreduce/in_memory_store.h"
#include "allreduce/nccl/nccl_communicator.h"
#include "common/error.h"
#include "gpu_test_support.h"
#include "model/cuda/cuda_device.h"
#include "model/cuda/device_buffer.h"
#include "tests/support/half_collective_checks.h"

namespace {

using gradsync::NcclCommunicator;
using gradsync::cuda::DeviceBuffer;
using gradsync::testing::half_expected;
using gradsync::testing::half_rank_data;
using gradsync::testing::word_of;
using gradsync::testing::wrong_bits;

// These run on rank threads too, where a failed REQUIRE could not unwind: errors are thrown as
// gradsync::Error and reported by run_ranks.
//
// Copies go on the communicator's own stream and are waited for. A plain cudaMemcpy runs on
// the legacy default stream, which a non-blocking stream (NCCL's) does not wait for, and from
// pageable memory it may return before its DMA has landed: the collective could read the
// buffer before the data is in it.
std::vector<float> to_host(const DeviceBuffer<float>& d, cudaStream_t stream) {
  std::vector<float> out(d.size());
  GRADSYNC_CUDA_CHECK(
      cudaMemcpyAsync(out.data(), d.data(), d.bytes(), cudaMemcpyDeviceToHost, stream));
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

DeviceBuffer<float> to_device(const std::vector<float>& h, cudaStream_t stream) {
  DeviceBuffer<float> d(h.size());
  GRADSYNC_CUDA_CHECK(
      cudaMemcpyAsync(d.data(), h.data(), d.bytes(), cudaMemcpyHostToDevice, stream));
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream));
  return d;
}

// Rank r holds r + 1 + (i % 97): the sum over n ranks is n(n+1)/2 + n * (i % 97).
void check_collectives(NcclCommunicator& comm, std::size_t count) {
  const int n = comm.size(), r = comm.rank();
  gradsync::cuda::DeviceGuard on(comm.device());
  const cudaStream_t stream = comm.stream();
  std::vector<float> mine(count);
  for (std::size_t i = 0; i < count; ++i) mine[i] = float(r + 1) + float(i % 97);

  DeviceBuffer<float> sum = to_device(mine, stream);
  comm.allreduce(sum.span(), gradsync::ReduceOp::kSum);
  std::size_t wrong = 0;
  const std::vector<float> summed = to_host(sum, stream);
  for (std::size_t i = 0; i < count; ++i) {
    wrong += summed[i] != float(n * (n + 1) / 2) + float(n) * float(i % 97);
  }
  CHECK_MESSAGE(wrong == 0, "allreduce: " << wrong << " wrong of " << count);

  DeviceBuffer<float> avg = to_device(std::vector<float>(count, float(2 * r)), stream);
  comm.allreduce(avg.span(), gradsync::ReduceOp::kAvg);
  wrong = 0;
  for (float v : to_host(avg, stream)) wrong += v != float(n - 1);  // the mean of 0, 2, ..., 2(n-1)
  CHECK_MESSAGE(wrong == 0, "allreduce avg: " << wrong << " wrong");

  DeviceBuffer<float> cast = to_device(r == 0 ? mine : std::vector<float>(count, -1.f), stream);
  comm.broadcast(cast.span(), 0);
  std::vector<float> root(count);
  for (std::size_t i = 0; i < count; ++i) root[i] = 1.f + float(i % 97);
  CHECK(to_host(cast, stream) == root);

  DeviceBuffer<float> in = to_device(mine, stream);
  DeviceBuffer<float> out(count * static_cast<std::size_t>(n));
  comm.allgather(in.span(), out.span());
  const std::vector<float> gathered = to_host(out, stream);
  wrong = 0;
  for (int q = 0; q < n; ++q) {
    for (std::size_t i = 0; i < count; ++i) {
      wrong += gathered[q * count + i] != float(q + 1) + float(i % 97);
    }
  }
  CHECK_MESSAGE(wrong == 0, "allgather: " << wrong << " wrong");

  DeviceBuffer<float> reduced = to_device(mine, stream);
  comm.reduce(reduced.span(), gradsync::ReduceOp::kSum, 0);
  if (r == 0) CHECK(to_host(reduced, stream) == summed);
  comm.barrier();

  // Reduce-scatter of n blocks of `count`: element j of rank q's input is q + 1 + (j % 97), so
  // rank r's block sums to n(n+1)/2 + n * ((r * count + i) % 97).
  std::vector<float> whole(count * static_cast<std::size_t>(n));
  for (std::size_t j = 0; j < whole.size(); ++j) whole[j] = float(r + 1) + float(j % 97);
  const std::size_t first = static_cast<std::size_t>(r) * count;
  DeviceBuffer<float> scatter_in = to_device(whole, stream);
  DeviceBuffer<float> scatter_sum(count), scatter_avg(count);
  comm.reduce_scatter(scatter_in.span(), scatter_sum.span(), gradsync::ReduceOp::kSum);
  comm.reduce_scatter(scatter_in.span(), scatter_avg.span(), gradsync::ReduceOp::kAvg);
  const std::vector<float> block_sum = to_host(scatter_sum, stream);
  wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    wrong += block_sum[i] != float(n * (n + 1) / 2) + float(n) * float((first + i) % 97);
  }
  CHECK_MESSAGE(wrong == 0, "reduce_scatter: " << wrong << " wrong of " << count);
  CHECK(to_host(scatter_in, stream) == whole);  // the input is left as it was
  // ncclAvg scales each input by 1/n before the sum: exact (and so equal to the allreduce's
  // block bit for bit) where n is a power of two; otherwise only close.
  DeviceBuffer<float> all_avg = to_device(whole, stream);
  comm.allreduce(all_avg.span(), gradsync::ReduceOp::kAvg);
  const std::vector<float> block_avg = to_host(scatter_avg, stream);
  const std::vector<float> all = to_host(all_avg, stream);
  const bool exact = (n & (n - 1)) == 0;
  wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const float mean = (float(n * (n + 1) / 2) + float(n) * float((first + i) % 97)) / float(n);
    wrong += exact ? block_avg[i] != mean || block_avg[i] != all[first + i]
                   : block_avg[i] != doctest::Approx(mean).epsilon(1e-6);
  }
  CHECK_MESSAGE(wrong == 0, "reduce_scatter avg: " << wrong << " wrong of " << count);
  CHECK(comm.counters().collectives == 9);
}

void run_ranks(int n, std::size_t count) {
  gradsync::InMemoryStore store;
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::jthread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        gradsync::NcclOptions options;
        options.device = r;
        options.timeout = std::chrono::seconds(60);
        auto comm = NcclCommunicator::create(store, r, n, options);
        check_collectives(*comm, count);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  threads.clear();
  for (const auto& e : errors) CHECK_MESSAGE(e.empty(), e);
}

template <typename T>
std::vector<T> download(const DeviceBuffer<T>& d, cudaStream_t stream) {
  std::vector<T> out(d.size());
  if (out.empty()) return out;
  GRADSYNC_CUDA_CHECK(
      cudaMemcpyAsync(out.data(), d.data(), d.bytes(), cudaMemcpyDeviceToHost, stream));
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& h, cudaStream_t stream) {
  DeviceBuffer<T> d(h.size());
  if (h.empty()) return d;
  GRADSYNC_CUDA_CHECK(
      cudaMemcpyAsync(d.data(), h.data(), d.bytes(), cudaMemcpyHostToDevice, stream));
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream));
  return d;
}

// ncclHalf and ncclBfloat16 sums of integer-valued data (tests/support/half_collective_checks.h:
// exact in any order), allreduced and reduce-scattered, averages where n is a power of two
// (ncclAvg scales each value by 1/n first, exactly then), and words gathered bit for bit, NaN
// patterns included.
void check_half_collectives(NcclCommunicator& comm, std::size_t count) {
  using gradsync::HalfType;
  using gradsync::ReduceOp;
  const int n = comm.size(), r = comm.rank();
  gradsync::cuda::DeviceGuard on(comm.device());
  const cudaStream_t stream = comm.stream();
  const bool exact_avg = (n & (n - 1)) == 0;
  for (const HalfType type : {HalfType::kFp16, HalfType::kBf16}) {
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      if (op == ReduceOp::kAvg && !exact_avg) continue;
      DeviceBuffer<std::uint16_t> data = upload(half_rank_data(type, r, count), stream);
      comm.allreduce_half(data.span(), type, op);
      const std::vector<std::uint16_t> got = download(data, stream);
      CHECK_MESSAGE(wrong_bits(got,
                               [&](std::size_t i) {
                                 return half_expected(type, n, i, op == ReduceOp::kAvg);
                               }) == 0,
                    std::string(gradsync::half_type_name(type))
                        << (op == ReduceOp::kAvg ? " avg" : " sum") << " of " << count);
    }
  }
  // ncclReduceScatter of the same data over n blocks of `count`: block r's exact sums, 2 bytes
  // a value counted (n - 1 blocks each way).
  for (const HalfType type : {HalfType::kFp16, HalfType::kBf16}) {
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      if (op == ReduceOp::kAvg && !exact_avg) continue;
      DeviceBuffer<std::uint16_t> in =
          upload(half_rank_data(type, r, count * static_cast<std::size_t>(n)), stream);
      DeviceBuffer<std::uint16_t> out(count);
      const gradsync::CommCounters before = comm.counters();
      comm.reduce_scatter_half(in.span(), out.span(), type, op);
      CHECK(comm.counters().bytes_sent - before.bytes_sent ==
            2 * count * static_cast<std::size_t>(n - 1));
      const std::vector<std::uint16_t> got = download(out, stream);
      CHECK_MESSAGE(wrong_bits(got,
                               [&](std::size_t i) {
                                 return half_expected(type, n, std::size_t(r) * count + i,
                                                      op == ReduceOp::kAvg);
                               }) == 0,
                    "reduce-scatter " << std::string(gradsync::half_type_name(type))
                                      << (op == ReduceOp::kAvg ? " avg" : " sum") << " of "
                                      << count);
    }
  }
  std::vector<std::uint32_t> words(count);
  for (std::size_t i = 0; i < count; ++i) words[i] = word_of(r, i);
  DeviceBuffer<std::uint32_t> in = upload(words, stream);
  DeviceBuffer<std::uint32_t> out(count * static_cast<std::size_t>(n));
  comm.allgather_words(in.span(), out.span());
  CHECK(wrong_bits(download(out, stream),
                   [&](std::size_t j) { return word_of(int(j / count), j % count); }) == 0);
}

void run_half_ranks(int n, std::size_t count) {
  gradsync::InMemoryStore store;
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::jthread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        gradsync::NcclOptions options;
        options.device = r;
        options.timeout = std::chrono::seconds(60);
        auto comm = NcclCommunicator::create(store, r, n, options);
        check_half_collectives(*comm, count);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  threads.clear();
  for (const auto& e : errors) CHECK_MESSAGE(e.empty(), e);
}

}  // namespace

TEST_CASE(
    "nccl: allreduce_half, reduce_scatter_half and allgather_words on device buffers, 1 rank and "
    "one per GPU") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  for (std::size_t count : {std::size_t{1}, std::size_t{1001}, (std::size_t{1} << 20) + 1}) {
    run_half_ranks(1, count);
    if (gradsync::visible_gpus() >= 2) run_half_ranks(gradsync::visible_gpus(), count);
  }
}

TEST_CASE("nccl: collectives are exact with world size 1") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  MESSAGE("NCCL " << NcclCommunicator::version());
  for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{1} << 20}) {
    run_ranks(1, count);
  }
}

TEST_CASE("nccl: collectives are exact with one rank per GPU") {
  GRADSYNC_SKIP_WITHOUT_GPUS(2);
  const int n = gradsync::visible_gpus();
  for (std::size_t count : {std::size_t{1}, std::size_t{1001}, std::size_t{1} << 20}) {
    run_ranks(n, count);
  }
}

TEST_CASE("nccl: zero elements complete at once, and host buffers are refused by name") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  gradsync::InMemoryStore store;
  auto comm = NcclCommunicator::create(store, 0, 1, gradsync::NcclOptions{});
  auto work = comm->allreduce_async({}, gradsync::ReduceOp::kSum);
  CHECK(work->completed());
  std::vector<float> host(8, 1.f);
  CHECK_THROWS_WITH_AS(comm->allreduce(host, gradsync::ReduceOp::kSum),
                       doctest::Contains("not device memory of cuda:0"), gradsync::Error);
  CHECK(comm->reduce_scatter_async({}, {}, gradsync::ReduceOp::kAvg)->completed());
  CHECK_THROWS_WITH_AS(comm->reduce_scatter(host, host, gradsync::ReduceOp::kSum),
                       doctest::Contains("not device memory of cuda:0"), gradsync::Error);
  // Sizes are checked before buffers: in.size() must be size() * out.size().
  DeviceBuffer<float> eight(8), three(3);
  CHECK_THROWS_WITH_AS(
      comm->reduce_scatter(eight.span(), three.span(), gradsync::ReduceOp::kSum),
      doctest::Contains("reduce_scatter: in.size() must be size() * out.size(), but in has 8 "
                        "floats, out 3, over 1 ranks"),
      gradsync::Error);
  // A refused call leaves the communicator usable.
  const cudaStream_t stream = comm->stream();
  DeviceBuffer<float> one = to_device({3.f}, stream);
  comm->allreduce(one.span(), gradsync::ReduceOp::kSum);
  CHECK(to_host(one, stream) == std::vector<float>{3.f});
}
