// The host-staged communicator (strategies/allreduce/host_staged_communicator.h): ranks whose
// buffers are on one GPU reduce through pinned host memory over a real TcpRing, and Gloo where
// the build has it. Two ranks run as two threads of this process, each with device buffers on
// GPU 0 and a producer stream of its own that is still busy when a collective is issued: the
// results must equal the host computation bit for bit, which they can only do if each copy
// waited for the producer. Then `allreduce` on two GPU models over staged tcp and gloo follows
// the CPU `single` trajectory. Every case that needs a GPU skips without one.
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "allreduce/in_memory_store.h"
#include "allreduce/make_communicator.h"
#include "common/error.h"
#include "gpu_test_support.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/cuda_device.h"
#include "model/cuda/cuda_handles.h"
#include "model/cuda/device_buffer.h"
#include "model/mlp.h"
#include "model/sampler.h"
#include "strategies/allreduce/allreduce_strategy.h"
#include "strategies/allreduce/host_staged_communicator.h"
#include "strategies/allreduce/model_communicator.h"
#include "tests/support/compare.h"
#include "tests/support/error_checks.h"
#include "tests/support/half_collective_checks.h"
#include "tests/support/ring_ranks.h"
#include "tests/support/training.h"
#include "worker/model_factory.h"
#include "worker/run_plan.h"
#include "worker/worker_loop.h"

using namespace gradsync::testing;
using namespace std::chrono_literals;
using gradsync::Communicator;
using gradsync::ReduceOp;
using gradsync::Work;

namespace {

// The host backends this build has: tcp always, gloo where libgloo-dev was found.
std::vector<std::string> host_backends() {
  std::vector<std::string> names = {"tcp"};
#ifdef GRADSYNC_HAVE_GLOO
  names.push_back("gloo");
#endif
  return names;
}

// One rank's staged communicator: the host communicator of `backend` (device -1), wrapped for
// buffers on GPU 0 with `producer` as the stream whose work each collective waits for.
std::shared_ptr<Communicator> staged(gradsync::Store& store, int rank, int size,
                                     const std::string& backend, cudaStream_t producer,
                                     std::chrono::milliseconds timeout = 20s) {
  gradsync::CommunicatorOptions options;
  options.backend = backend;
  options.tcp.timeout = timeout;
  return gradsync::make_host_staged_communicator(
      gradsync::make_communicator(store, rank, size, options), 0, producer);
}

// Per rank, 0.1 (r + 1) / (i + 3): sums that are not whole numbers. With two ranks any order
// of the sum gives the same float, and halving it is exact, so the host computes the result.
std::vector<float> noisy_data(int rank, std::size_t length) {
  std::vector<float> data(length);
  for (std::size_t i = 0; i < length; ++i) data[i] = 0.1f * float(rank + 1) / float(i + 3);
  return data;
}

// A producer stream that is busy for `ms` and then writes `values` into `device`: a collective
// issued right after reads garbage unless it waits for the stream. `source` is pinned, so the
// write is truly asynchronous, and must stay alive until the stream has run it.
void CUDART_CB hold_stream(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<const int*>(ms)));
}
void produce_late(cudaStream_t producer, const int* ms, const std::vector<float>& values,
                  gradsync::cuda::PinnedBuffer<float>& source, float* device) {
  GRADSYNC_CUDA_CHECK(cudaLaunchHostFunc(producer, hold_stream, const_cast<int*>(ms)));
  if (values.empty()) return;
  std::copy(values.begin(), values.end(), source.data());
  GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(device, source.data(), values.size() * sizeof(float),
                                      cudaMemcpyHostToDevice, producer));
}

// Device memory filled with NaN (all bits set): what a copy that ran too early would read.
gradsync::cuda::DeviceBuffer<float> garbage(std::size_t count) {
  gradsync::cuda::DeviceBuffer<float> buffer(count);
  if (count > 0) GRADSYNC_CUDA_CHECK(cudaMemset(buffer.data(), 0xff, buffer.bytes()));
  GRADSYNC_CUDA_CHECK(cudaDeviceSynchronize());
  return buffer;
}

std::vector<float> download(std::span<const float> device) {
  std::vector<float> host(device.size());
  if (!host.empty()) {
    GRADSYNC_CUDA_CHECK(
        cudaMemcpy(host.data(), device.data(), device.size_bytes(), cudaMemcpyDeviceToHost));
  }
  return host;
}

void upload(std::span<float> device, const std::vector<float>& host) {
  if (host.empty()) return;
  GRADSYNC_CUDA_CHECK(
      cudaMemcpy(device.data(), host.data(), device.size_bytes(), cudaMemcpyHostToDevice));
  GRADSYNC_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace

TEST_CASE("host-staged communicator: refused naming the device when it is not visible") {
  // Runs without a GPU too: device 99 is never visible, and no GPU at all says so.
  gradsync::InMemoryStore store;
  std::shared_ptr<Communicator> host = gradsync::make_tcp_ring(store, 0, 1, ring_options());
  const std::string message = error_of<gradsync::Error>(
      [&] { gradsync::make_host_staged_communicator(host, 99, nullptr); }, "device 99 refused");
  CHECK(has(message, "host-staged communicator"));
}

TEST_CASE(
    "host-staged communicator: allreduce, broadcast and allgather of device buffers equal "
    "the host computation") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  static const int kHoldMs = 100;  // a copy that did not wait for the producer reads NaN
  for (const std::string& backend : host_backends()) {
    CAPTURE(backend);
    const int n = 2;
    gradsync::InMemoryStore store;
    run_ranks(
        n,
        [&](int r) {
          gradsync::cuda::DeviceGuard on(0);
          gradsync::cuda::Stream producer = gradsync::cuda::make_stream();
          auto comm = staged(store, r, n, backend, producer.get());
          CHECK(comm->rank() == r);
          CHECK(comm->size() == n);
          // The largest collective first, as training's broadcast of the parameters is: the
          // pinned staging memory never grows (and never frees) while a producer is held below.
          {
            auto warm = garbage((1 << 20) + 3);
            comm->broadcast(warm.span(), 0);
          }
          for (const std::size_t length :
               {std::size_t(0), std::size_t(1), std::size_t(1000), std::size_t((1 << 20) + 3)}) {
            CAPTURE(length);
            for (const ReduceOp op : {ReduceOp::kAvg, ReduceOp::kSum}) {
              const std::vector<float> mine = noisy_data(r, length);
              auto device = garbage(length);
              gradsync::cuda::PinnedBuffer<float> source(length);
              produce_late(producer.get(), &kHoldMs, mine, source, device.data());
              std::shared_ptr<Work> work = comm->allreduce_async(device.span(), op);
              work->wait(comm->timeout());
              CHECK(work->completed());
              const std::vector<float> a = noisy_data(0, length), b = noisy_data(1, length);
              const std::vector<float> got = download(device.span());
              CHECK(wrong_elements(got, [&](std::size_t i) {
                      const float sum = a[i] + b[i];
                      return op == ReduceOp::kAvg ? sum / 2.0f : sum;
                    }) == 0);
              GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(producer.get()));  // before `source` goes
            }
          }
          // Broadcast from rank 1: rank 0's buffer (still being written by its producer when the
          // call is made) ends with rank 1's values, and rank 1's is unchanged.
          {
            const std::size_t length = 100003;
            auto device = garbage(length);
            gradsync::cuda::PinnedBuffer<float> source(length);
            produce_late(producer.get(), &kHoldMs, noisy_data(r, length), source, device.data());
            comm->broadcast(device.span(), 1);
            const std::vector<float> root = noisy_data(1, length);
            CHECK(wrong_elements(download(device.span()), [&](std::size_t i) { return root[i]; }) ==
                  0);
            GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(producer.get()));
          }
          // Allgather: rank k's input lands at out[k * m].
          {
            const std::size_t m = 4099;
            auto in = garbage(m);
            auto out = garbage(m * n);
            gradsync::cuda::PinnedBuffer<float> source(m);
            produce_late(producer.get(), &kHoldMs, noisy_data(r, m), source, in.data());
            comm->allgather(in.span(), out.span());
            const std::vector<float> a = noisy_data(0, m), b = noisy_data(1, m);
            CHECK(wrong_elements(download(out.span()),
                                 [&](std::size_t i) { return i < m ? a[i] : b[i - m]; }) == 0);
            CHECK(download(in.span()) == noisy_data(r, m));  // the input is left as it was
            GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(producer.get()));
          }
          comm->barrier();
          CHECK(comm->counters().collectives > 0);
          CHECK(comm->counters().bytes_sent > 0);
        },
        120s);
  }
}

TEST_CASE(
    "host-staged communicator: reduce-scatter of device buffers equals the host computation") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  static const int kHoldMs = 100;  // a copy that did not wait for the producer reads NaN
  const std::size_t largest = (1 << 19) + 3;
  for (const std::string& backend : host_backends()) {
    CAPTURE(backend);
    const int n = 2;
    gradsync::InMemoryStore store;
    run_ranks(
        n,
        [&](int r) {
          gradsync::cuda::DeviceGuard on(0);
          gradsync::cuda::Stream producer = gradsync::cuda::make_stream();
          auto comm = staged(store, r, n, backend, producer.get());
          // The staging memory reaches its largest size (the input, then the block) here, not
          // while a producer is held below.
          {
            auto warm = garbage(largest * (n + 1));
            comm->broadcast(warm.span(), 0);
          }
          for (const std::size_t block :
               {std::size_t(0), std::size_t(1), std::size_t(1001), largest}) {
            CAPTURE(block);
            for (const ReduceOp op : {ReduceOp::kAvg, ReduceOp::kSum}) {
              const std::size_t length = block * n;
              const std::vector<float> mine = noisy_data(r, length);
              auto in = garbage(length);
              auto out = garbage(block);
              gradsync::cuda::PinnedBuffer<float> source(length);
              produce_late(producer.get(), &kHoldMs, mine, source, in.data());
              std::shared_ptr<Work> work = comm->reduce_scatter_async(in.span(), out.span(), op);
              work->wait(comm->timeout());
              CHECK(work->completed());
              // Two ranks: a + b is the same float in either order, and halving it is exact.
              const std::vector<float> a = noisy_data(0, length), b = noisy_data(1, length);
              CHECK(wrong_elements(download(out.span()), [&](std::size_t i) {
                      const std::size_t j = std::size_t(r) * block + i;
                      const float sum = a[j] + b[j];
                      return op == ReduceOp::kAvg ? sum / 2.0f : sum;
                    }) == 0);
              CHECK(download(in.span()) == mine);  // the input is left as it was
              GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(producer.get()));  // before `source` goes
            }
          }
          // Sizes that do not fit are refused at the call, and nothing is issued: the barrier
          // after it still pairs with the other rank's.
          {
            auto in = garbage(9);
            auto out = garbage(4);
            const std::string message = error_of<gradsync::Error>(
                [&] { comm->reduce_scatter_async(in.span(), out.span(), ReduceOp::kSum); },
                "in.size() != size() * out.size() must be refused");
            CHECK(has(message,
                      "reduce_scatter: in.size() must be size() * out.size(), but in "
                      "has 9 floats, out 4, over 2 ranks"));
          }
          comm->barrier();
        },
        120s);
  }
}

TEST_CASE(
    "host-staged communicator: buckets issued back to back during a busy producer "
    "complete in issue order with the right values") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  // Like backward: the producer writes the buffer from its end towards its start, one bucket
  // after another with a pause before each, and each bucket's allreduce is issued as soon as
  // its write is enqueued (not done).
  static const int kPauseMs = 40;
  const std::vector<std::size_t> sizes = {3, 1, 5000, 257, 70001, 16, 4096};
  std::size_t total = 0;
  for (const std::size_t s : sizes) total += s;
  for (const std::string& backend : host_backends()) {
    CAPTURE(backend);
    const int n = 2;
    gradsync::InMemoryStore store;
    run_ranks(
        n,
        [&](int r) {
          gradsync::cuda::DeviceGuard on(0);
          gradsync::cuda::Stream producer = gradsync::cuda::make_stream();
          auto comm = staged(store, r, n, backend, producer.get());
          const std::vector<float> mine = noisy_data(r, total);
          auto grads = garbage(total);
          gradsync::cuda::PinnedBuffer<float> source(total);
          std::copy(mine.begin(), mine.end(), source.data());
          comm->broadcast(grads.span(), 0);  // the staging memory reaches its size here
          for (int step = 0; step < 3; ++step) {
            CAPTURE(step);
            if (step > 0) {  // the reduced values from the step before are overwritten
              GRADSYNC_CUDA_CHECK(
                  cudaMemsetAsync(grads.data(), 0xff, grads.bytes(), producer.get()));
            }
            std::vector<std::shared_ptr<Work>> works;
            std::size_t end = total;
            for (auto size = sizes.rbegin(); size != sizes.rend(); ++size) {
              const std::size_t begin = end - *size;
              GRADSYNC_CUDA_CHECK(
                  cudaLaunchHostFunc(producer.get(), hold_stream, const_cast<int*>(&kPauseMs)));
              GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(grads.data() + begin, source.data() + begin,
                                                  *size * sizeof(float), cudaMemcpyHostToDevice,
                                                  producer.get()));
              works.push_back(
                  comm->allreduce_async(grads.span().subspan(begin, *size), ReduceOp::kAvg));
              end = begin;
            }
            // The last one issued completes last: once it has, every earlier one has.
            works.back()->wait(comm->timeout());
            for (const auto& work : works) CHECK(work->completed());
            for (const auto& work : works) work->wait(comm->timeout());
            const std::vector<float> a = noisy_data(0, total), b = noisy_data(1, total);
            CHECK(wrong_elements(download(grads.span()),
                                 [&](std::size_t i) { return (a[i] + b[i]) / 2.0f; }) == 0);
          }
          GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(producer.get()));
        },
        120s);
  }
}

TEST_CASE("host-staged communicator: a call returns at once; its staging waits for the producer") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  // One rank, so that no other thread makes CUDA calls while the times are taken.
  static const int kHoldMs = 500;
  static const int kPauseMs = 60;
  gradsync::cuda::DeviceGuard on(0);
  gradsync::cuda::Stream producer = gradsync::cuda::make_stream();
  gradsync::InMemoryStore store;
  auto comm = staged(store, 0, 1, "tcp", producer.get());
  const std::vector<float> values = noisy_data(0, 300007);
  auto device = garbage(values.size());
  gradsync::cuda::PinnedBuffer<float> source(values.size());
  comm->broadcast(device.span(), 0);  // the staging memory reaches its size here
  {
    // One collective: the call does not wait for the held producer, the Work does.
    produce_late(producer.get(), &kHoldMs, values, source, device.data());
    const auto start = Clock::now();
    std::shared_ptr<Work> work = comm->allreduce_async(device.span(), ReduceOp::kAvg);
    CHECK(ms_since(start) < kHoldMs / 2);
    CHECK_FALSE(work->completed());
    work->wait(comm->timeout());
    CHECK(ms_since(start) >= kHoldMs - 50);
    // Read before anything waits for the producer: the values are there because the staging
    // waited for them (with the copy too early, the copy back would have written NaN).
    CHECK(download(device.span()) == values);
    GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(producer.get()));
  }
  {
    // Buckets as backward issues them: each right after its write is enqueued, behind a pause.
    GRADSYNC_CUDA_CHECK(cudaMemsetAsync(device.data(), 0xff, device.bytes(), producer.get()));
    const std::size_t buckets = 5;
    const std::size_t per = values.size() / buckets;
    std::vector<std::shared_ptr<Work>> works;
    const auto start = Clock::now();
    for (std::size_t k = buckets; k-- > 0;) {
      const std::size_t begin = k * per;
      const std::size_t count = k + 1 == buckets ? values.size() - begin : per;
      GRADSYNC_CUDA_CHECK(
          cudaLaunchHostFunc(producer.get(), hold_stream, const_cast<int*>(&kPauseMs)));
      GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(device.data() + begin, source.data() + begin,
                                          count * sizeof(float), cudaMemcpyHostToDevice,
                                          producer.get()));
      works.push_back(comm->allreduce_async(device.span().subspan(begin, count), ReduceOp::kSum));
    }
    CHECK(ms_since(start) < kPauseMs * long(buckets) / 2);  // no call waited for a pause
    works.back()->wait(comm->timeout());
    CHECK(ms_since(start) >= kPauseMs * long(buckets) - 50);
    for (const auto& work : works) CHECK(work->completed());  // in issue order
    CHECK(download(device.span()) == values);
    GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(producer.get()));
  }
}

TEST_CASE("host-staged communicator: a host buffer is refused at the call; one rank is a copy") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  gradsync::cuda::DeviceGuard on(0);
  gradsync::InMemoryStore store;
  auto comm = staged(store, 0, 1, "tcp", nullptr);
  std::vector<float> host(10, 1.0f);
  const std::string message = error_of<gradsync::Error>(
      [&] { comm->allreduce_async(host, ReduceOp::kAvg); }, "a host buffer must be refused");
  CHECK(has(message, "not device memory of cuda:0"));
  // World size 1: the average is the buffer itself, whatever the staging did to it.
  const std::vector<float> values = noisy_data(0, 1001);
  auto device = garbage(values.size());
  upload(device.span(), values);
  comm->allreduce(device.span(), ReduceOp::kAvg);
  CHECK(download(device.span()) == values);
  comm->allreduce(std::span<float>(), ReduceOp::kSum);  // zero elements: nothing to do
}

TEST_CASE(
    "host-staged communicator: allreduce_half and allgather_words of device buffers are the host "
    "communicator's, 2 bytes a value") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  using gradsync::HalfType;
  for (const std::string& backend : host_backends()) {
    CAPTURE(backend);
    const int n = 2;
    gradsync::InMemoryStore store;
    run_ranks(
        n,
        [&](int r) {
          gradsync::cuda::DeviceGuard on(0);
          auto comm = staged(store, r, n, backend, nullptr);
          for (const std::size_t length : {std::size_t(0), std::size_t(1), std::size_t(100003)}) {
            for (const HalfType type : {HalfType::kFp16, HalfType::kBf16}) {
              for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
                const std::vector<std::uint16_t> mine = half_rank_data(type, r, length);
                gradsync::cuda::DeviceBuffer<std::uint16_t> device(length);
                if (length > 0) {
                  GRADSYNC_CUDA_CHECK(cudaMemcpy(device.data(), mine.data(), device.bytes(),
                                                 cudaMemcpyHostToDevice));
                }
                const gradsync::CommCounters before = comm->counters();
                comm->allreduce_half(device.span(), type, op);
                // The ring formula on 2 bytes a value: 2 (N - 1) / N of them each way.
                CHECK(comm->counters().bytes_sent - before.bytes_sent == 2 * length);
                std::vector<std::uint16_t> got(length);
                if (length > 0) {
                  GRADSYNC_CUDA_CHECK(cudaMemcpy(got.data(), device.data(), device.bytes(),
                                                 cudaMemcpyDeviceToHost));
                }
                CHECK(wrong_bits(got, [&](std::size_t i) {
                        return half_expected(type, n, i, op == ReduceOp::kAvg);
                      }) == 0);
              }
            }
          }
          const std::size_t m = 1001;
          std::vector<std::uint32_t> words(m);
          for (std::size_t i = 0; i < m; ++i) words[i] = word_of(r, i);
          gradsync::cuda::DeviceBuffer<std::uint32_t> in(m), out(m * n);
          GRADSYNC_CUDA_CHECK(
              cudaMemcpy(in.data(), words.data(), in.bytes(), cudaMemcpyHostToDevice));
          comm->allgather_words(in.span(), out.span());
          std::vector<std::uint32_t> gathered(m * n);
          GRADSYNC_CUDA_CHECK(
              cudaMemcpy(gathered.data(), out.data(), out.bytes(), cudaMemcpyDeviceToHost));
          CHECK(wrong_bits(gathered, [&](std::size_t j) { return word_of(int(j / m), j % m); }) ==
                0);
        },
        120s);
  }
}

TEST_CASE(
    "host-staged communicator: reduce_scatter_half of device buffers is the host communicator's, "
    "2 bytes a value") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  using gradsync::HalfType;
  for (const std::string& backend : host_backends()) {
    CAPTURE(backend);
    const int n = 2;
    gradsync::InMemoryStore store;
    run_ranks(
        n,
        [&](int r) {
          gradsync::cuda::DeviceGuard on(0);
          auto comm = staged(store, r, n, backend, nullptr);
          for (const std::size_t block : {std::size_t(0), std::size_t(1), std::size_t(50001)}) {
            for (const HalfType type : {HalfType::kFp16, HalfType::kBf16}) {
              for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
                const std::vector<std::uint16_t> mine = half_rank_data(type, r, n * block);
                gradsync::cuda::DeviceBuffer<std::uint16_t> in(mine.size()), out(block);
                if (block > 0) {
                  GRADSYNC_CUDA_CHECK(
                      cudaMemcpy(in.data(), mine.data(), in.bytes(), cudaMemcpyHostToDevice));
                }
                const gradsync::CommCounters before = comm->counters();
                comm->reduce_scatter_half(in.span(), out.span(), type, op);
                // The ring's (N - 1) / N of the input, 2 bytes a value: one block at 2 ranks.
                CHECK(comm->counters().bytes_sent - before.bytes_sent == 2 * block);
                std::vector<std::uint16_t> got(block);
                if (block > 0) {
                  GRADSYNC_CUDA_CHECK(
                      cudaMemcpy(got.data(), out.data(), out.bytes(), cudaMemcpyDeviceToHost));
                }
                CHECK(wrong_bits(got, [&](std::size_t i) {
                        return half_expected(type, n, std::size_t(r) * block + i,
                                             op == ReduceOp::kAvg);
                      }) == 0);
              }
            }
          }
          // Sizes that disagree are refused at the call, before any staging.
          gradsync::cuda::DeviceBuffer<std::uint16_t> odd(2 * 4 + 1), four(4);
          CHECK(has(error_of<gradsync::Error>(
                        [&] {
                          comm->reduce_scatter_half_async(odd.span(), four.span(), HalfType::kBf16,
                                                          ReduceOp::kSum);
                        },
                        "mismatched sizes must be refused"),
                    "reduce_scatter_half: in.size() must be size() * out.size()"));
        },
        120s);
  }
}

TEST_CASE(
    "host-staged communicator: a rank that never issues the collective makes the other "
    "time out, with the host communicator's error") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  for (const std::string& backend : host_backends()) {
    CAPTURE(backend);
    const int n = 2;
    const auto timeout = 1000ms;
    gradsync::InMemoryStore store;
    Latch failed(1);
    run_ranks(
        n,
        [&](int r) {
          gradsync::cuda::DeviceGuard on(0);
          auto comm = staged(store, r, n, backend, nullptr, timeout);
          const std::vector<float> values = noisy_data(r, 10000);
          auto device = garbage(values.size());
          upload(device.span(), values);
          comm->allreduce(device.span(), ReduceOp::kAvg);  // #1 succeeds on both
          if (r == 1) {
            // Rank 1 stays alive, connections open, but never issues #2.
            CHECK(failed.wait(30s));
            return;
          }
          upload(device.span(), values);
          const auto start = Clock::now();
          std::string message;
          try {
            comm->allreduce(device.span(), ReduceOp::kAvg);
            FAIL_CHECK("collective #2 should have timed out");
          } catch (const gradsync::TimeoutError& e) {
            message = e.what();
            // TcpRing knows whom it waited for; Gloo's own message names no peer with 2 ranks.
            if (backend == "tcp") CHECK(e.rank() == 1);
          }
          const auto elapsed = ms_since(start);
          failed.count_down();
          MESSAGE(backend << ": rank 0 after " << elapsed << " ms: " << message);
          CHECK(elapsed >= 900);
          CHECK(elapsed < 1000 + 2000 + 5000);  // timeout, the ring's report grace, slack
          CHECK(has(message, "collective #2 allreduce avg of 10000 floats"));
          CHECK(has(message, "timed out after 1000 ms"));
          if (backend == "tcp") CHECK(has(message, "waiting for rank 1"));
          // The buffer was not written by a failed collective: it holds what was uploaded.
          CHECK(download(device.span()) == values);
          // The communicator is now unusable, and says why, at once.
          const auto again = Clock::now();
          CHECK(error_of<gradsync::TimeoutError>([&] { comm->barrier(); }, "still failed") ==
                message);
          CHECK(ms_since(again) < 500);
        },
        60s);
  }
}

TEST_CASE(
    "host-staged communicator: abort and destruction end the collectives in flight at "
    "once, and leave the device buffers alone") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  for (const std::string& backend : host_backends()) {
    CAPTURE(backend);
    const int n = 2;
    gradsync::InMemoryStore store;
    Latch done(1);
    run_ranks(
        n,
        [&](int r) {
          gradsync::cuda::DeviceGuard on(0);
          // A long timeout: nothing below may take it.
          auto comm = staged(store, r, n, backend, nullptr, 20s);
          const std::vector<float> values = noisy_data(r, 10000);
          auto device = garbage(values.size());
          upload(device.span(), values);
          comm->allreduce(device.span(), ReduceOp::kAvg);  // #1 succeeds on both
          if (r == 1) {
            CHECK(done.wait(30s));  // never issues #2
            return;
          }
          upload(device.span(), values);
          // Abort: the running collective (waiting for rank 1) and those queued behind it fail
          // at once, naming the reason.
          std::vector<std::shared_ptr<Work>> works;
          for (std::size_t k = 0; k < 3; ++k) {
            works.push_back(
                comm->allreduce_async(device.span().subspan(k * 1000, 1000), ReduceOp::kAvg));
          }
          std::this_thread::sleep_for(100ms);  // the first is running by now
          const auto start = Clock::now();
          comm->abort("rank 0 failed: results/metrics.csv: No space left on device");
          for (const auto& work : works) {
            CHECK(has(error_of<gradsync::Error>([&] { work->wait(comm->timeout()); },
                                                "an aborted collective must fail"),
                      "No space left on device"));
          }
          CHECK(ms_since(start) < 3000);
          CHECK(download(device.span()) == values);
          // Destruction with a collective in flight (here failing) returns at once too.
          auto late = comm->allreduce_async(device.span(), ReduceOp::kAvg);
          const auto destroyed = Clock::now();
          comm.reset();
          CHECK(ms_since(destroyed) < 3000);
          CHECK_THROWS_AS(late->wait(1s), gradsync::Error);
          CHECK(download(device.span()) == values);
          done.count_down();
        },
        60s);
  }
  // A communicator destroyed while its collective waits for a peer (not aborted first) does
  // not wait for that peer's timeout either.
  for (const std::string& backend : host_backends()) {
    CAPTURE(backend);
    const int n = 2;
    gradsync::InMemoryStore store;
    Latch done(1);
    run_ranks(
        n,
        [&](int r) {
          gradsync::cuda::DeviceGuard on(0);
          auto comm = staged(store, r, n, backend, nullptr, 20s);
          const std::vector<float> values = noisy_data(r, 10000);
          auto device = garbage(values.size());
          upload(device.span(), values);
          comm->allreduce(device.span(), ReduceOp::kAvg);
          if (r == 1) {
            CHECK(done.wait(30s));
            return;
          }
          upload(device.span(), values);
          auto work = comm->allreduce_async(device.span(), ReduceOp::kAvg);
          std::this_thread::sleep_for(100ms);
          const auto start = Clock::now();
          comm.reset();
          CHECK(ms_since(start) < 3000);
          CHECK_THROWS_AS(work->wait(1s), gradsync::Error);
          CHECK(download(device.span()) == values);
          done.count_down();
        },
        60s);
  }
}

TEST_CASE(
    "host-staged communicator: allreduce on GPU models over staged tcp and gloo follows "
    "the CPU single trajectory") {
  GRADSYNC_SKIP_WITHOUT_GPUS(1);
  const int ranks = 2;
  const int batch = 32;  // per rank: `single` runs the global batch of 64
  const std::int64_t steps = 20;
  const gradsync::SgdOptions sgd{0.05, 0.9, 1e-4};
  const std::vector<float> reference = train_single({32, 16}, batch * ranks, steps, sgd);
  const gradsync::Mlp layout({32, 32, 16, 10}, 1);
  for (const std::string& backend : host_backends()) {
    CAPTURE(backend);
    gradsync::InMemoryStore store;
    std::vector<std::vector<float>> finals(ranks);
    std::vector<std::size_t> buckets(ranks);
    run_ranks(
        ranks,
        [&](int r) {
          gradsync::Config config;
          config.strategy = "allreduce";
          config.workers = ranks;
          config.device = "gpu";
          config.comm.backend = backend;
          config.data.kind = "synthetic";
          config.model.hidden = {32, 16};
          config.train.batch = batch;
          config.train.lr = sgd.lr;
          config.train.momentum = sgd.momentum;
          config.train.weight_decay = sgd.weight_decay;
          config.comm.bucket_mb = 0.001;  // one layer a bucket: several in flight in backward
          const gradsync::TrainTest& data = synthetic_data();
          const std::vector<int> widths = gradsync::plan_run(config, data).widths;
          auto model = gradsync::make_model(config, widths, batch, 0);
          gradsync::CommunicatorOptions options;
          options.backend = backend;
          options.tcp.timeout = 20s;
          // Declared after the model, so destroyed before it: no copy lands in freed memory.
          std::shared_ptr<Communicator> comm =
              gradsync::make_model_communicator(store, r, ranks, options, *model);
          gradsync::AllreduceStrategyOptions allreduce;
          allreduce.bucket_bytes = gradsync::bucket_bytes(config);
          allreduce.sgd = gradsync::sgd_options(config);
          allreduce.device = model->device();
          {
            gradsync::AllreduceStrategy strategy(comm, allreduce);
            gradsync::DistributedSampler sampler(data.train.size, r, ranks, batch,
                                                 config.train.seed);
            gradsync::LoopOptions loop;
            loop.steps = steps;
            gradsync::run_worker_loop(*model, strategy, sampler, data, loop, {});
            buckets[r] = strategy.last_buckets().size();
          }
          finals[r].resize(model->param_count());
          model->copy_params_to_host(finals[r]);
        },
        120s);
    CHECK(buckets[0] >= 2);
    CHECK(finals[0] == finals[1]);  // the same reduced gradients, the same update: bitwise
    const double diff = max_relative_difference(finals[0], reference, layout.layers());
    MESSAGE("GPU allreduce over staged " << backend << ", 2 ranks on cuda:0, vs CPU single after "
                                         << steps << " steps: max relative difference " << diff);
    CHECK(diff <= 1e-4);
  }
}
