// The host-staged communicator's 16-bit collectives and words allgather
// (strategies/allreduce/host_staged_communicator.h): allreduce_half, reduce_scatter_half and
// allgather_words of device buffers on GPU 0 give the host communicator's bits (tcp, and gloo
// where the build has it), with 2 bytes a value on the wire. Values are known in closed form
// (tests/support/half_collective_checks.h). Two ranks as two threads; skips without a GPU.
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "allreduce/in_memory_store.h"
#include "common/error.h"
#include "gpu_test_support.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/cuda_device.h"
#include "model/cuda/device_buffer.h"
#include "tests/support/error_checks.h"
#include "tests/support/half_collective_checks.h"
#include "tests/support/host_staged_support.h"
#include "tests/support/ring_ranks.h"

using namespace gradsync::testing;
using namespace gradsync::testing::host_staged;
using namespace std::chrono_literals;
using gradsync::ReduceOp;

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
