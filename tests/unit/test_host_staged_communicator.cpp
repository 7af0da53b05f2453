// The host-staged communicator (strategies/allreduce/host_staged_communicator.h): ranks whose
// buffers are on one GPU reduce through pinned host memory over a real TcpRing, and Gloo where
// the build has it. Two ranks run as two threads of this process, each with device buffers on
// GPU 0 and a producer stream of its own that is still busy when a collective is issued: the
// results must equal the host computation bit for bit, which they can only do if each copy
// waited for the producer. The 16-bit collectives: test_host_staged_half.cpp; timeouts and
// abort: test_host_staged_failures.cpp; training on GPU models: test_host_staged_training.cpp.
// Every case that needs a GPU skips without one.
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "allreduce/in_memory_store.h"
#include "allreduce/tcp/tcp_ring.h"
#include "common/error.h"
#include "gpu_test_support.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/cuda_device.h"
#include "model/cuda/cuda_handles.h"
#include "model/cuda/device_buffer.h"
#include "strategies/allreduce/host_staged_communicator.h"
#include "tests/support/error_checks.h"
#include "tests/support/host_staged_support.h"
#include "tests/support/ring_ranks.h"

using namespace gradsync::testing;
using namespace gradsync::testing::host_staged;
using namespace std::chrono_literals;
using gradsync::Communicator;
using gradsync::ReduceOp;
using gradsync::Work;

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
