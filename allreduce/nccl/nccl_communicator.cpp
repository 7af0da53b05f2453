#include "allreduce/nccl/nccl_communicator.h"

#include <cstring>
#include <utility>

#include "allreduce/collective_checks.h"
#include "allreduce/nccl/nccl_state.h"
#include "common/error.h"
#include "model/cuda/cuda_device.h"

namespace gradsync {

using nccl::check_cuda;
using nccl::OnDevice;
using nccl::settle;

namespace {

// The oldest NCCL the communicator runs on. CMake refuses older headers; this refuses an older
// library found at run time (LD_LIBRARY_PATH, another CUDA install): 2.14 has the non-blocking
// ncclCommInitRankConfig that joining with a deadline needs, and ncclCommFinalize.
constexpr int kMinimumNcclCode = 21400;

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kAvg ? ncclAvg : ncclSum; }

// Releases what create() made, whichever part of it was made. The communicator is finalised
// only when idle (bounded by the timeout) and aborted otherwise: destroying one with
// collectives in flight would wait for peers that may be gone.
void release(nccl::State& s) noexcept {
  try {
    OnDevice on(s.device);
    if (!s.aborted && s.comm != nullptr) {
      if (s.stream != nullptr && cudaStreamQuery(s.stream) != cudaSuccess) {
        cudaGetLastError();
        s.abort_comm();
      } else {
        const auto deadline = std::chrono::steady_clock::now() + s.timeout;
        if (settle(s, ncclCommFinalize(s.comm), deadline) != ncclSuccess) {
          s.abort_comm();
        } else {
          ncclCommDestroy(s.comm);
        }
      }
    }
    if (s.barrier_scratch != nullptr) cudaFree(std::exchange(s.barrier_scratch, nullptr));
    if (s.producer_done != nullptr) cudaEventDestroy(std::exchange(s.producer_done, nullptr));
    if (s.stream != nullptr) cudaStreamDestroy(std::exchange(s.stream, nullptr));
  } catch (const std::exception&) {
    // No device to select: nothing of ours can be running on it either.
  }
  s.comm = nullptr;
}

}  // namespace

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(Store& store, int rank, int size,
                                                           const NcclOptions& options) {
  GRADSYNC_CHECK(size >= 1 && rank >= 0 && rank < size, "NCCL rank outside [0, size)");
  auto state = std::make_shared<nccl::State>();
  state->rank = rank;
  state->size = size;
  state->device = options.device;
  state->timeout = options.timeout;
  // cuda_device_count throws, with the runtime's reason, for GPUs that are there but unusable
  // (a driver too old): that is not "no device".
  const int visible = cuda::cuda_device_count();
  if (visible == 0) {
    throw Error(state->where() + ": no CUDA device is visible to rank " + std::to_string(rank));
  }
  if (options.device < 0 || options.device >= visible) {
    throw Error(state->where() + ": device " + std::to_string(options.device) +
                " is not visible to rank " + std::to_string(rank) + " (" + std::to_string(visible) +
                " device(s))");
  }
  if (int code = 0; ncclGetVersion(&code) != ncclSuccess || code < kMinimumNcclCode) {
    throw Error(state->where() + ": the NCCL library loaded is " + version() + " (built against " +
                std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." +
                std::to_string(NCCL_PATCH) + "); gradsync needs 2.14 or newer");
  }
  OnDevice on(options.device);

  // The unique id is rank 0's invitation: 128 opaque bytes, passed through the Store.
  const std::string key = options.store_prefix + "/unique_id";
  ncclUniqueId id;
  if (rank == 0) {
    const ncclResult_t got = ncclGetUniqueId(&id);
    if (got != ncclSuccess) {
      throw Error(state->where() + ": ncclGetUniqueId: " + ncclGetErrorString(got));
    }
    store.set(key, std::string(id.internal, sizeof id.internal));
  } else {
    const std::string bytes = store.get(key, options.timeout);
    GRADSYNC_CHECK(bytes.size() == sizeof id.internal, "NCCL unique id of the wrong size");
    std::memcpy(id.internal, bytes.data(), sizeof id.internal);
  }

  // Non-blocking, so joining has a deadline: a blocking ncclCommInitRank waits forever for a
  // rank that never comes.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  ncclResult_t result = ncclCommInitRankConfig(&state->comm, size, id, rank, &config);
  if (result == ncclInProgress || result == ncclSuccess) {
    result = settle(*state, ncclInProgress, deadline);
  }
  if (result != ncclSuccess) {
    const std::string why = result == ncclInProgress
                                ? "not all " + std::to_string(size) + " ranks joined within " +
                                      std::to_string(options.timeout.count()) +
                                      " ms (NCCL cannot tell which are missing)"
                                : state->nccl_message(result);
    state->abort_comm();
    if (result == ncclInProgress) {
      throw TimeoutError(rank, state->where(), "ncclCommInitRank", why);
    }
    throw Error("rank " + std::to_string(rank) + " (" + state->where() +
                ") during ncclCommInitRank: " + why);
  }
  try {
    check_cuda(cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking),
               "cudaStreamCreateWithFlags", *state);
    check_cuda(cudaEventCreateWithFlags(&state->producer_done, cudaEventDisableTiming),
               "cudaEventCreateWithFlags", *state);
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&state->barrier_scratch), sizeof(float)),
               "cudaMalloc", *state);
  } catch (...) {
    // The peers joined and went on: aborting does not wait for them, finalising would.
    state->abort_comm();
    release(*state);  // what was made so far
    throw;
  }
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(state)));
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<nccl::State> state) : state_(std::move(state)) {}

NcclCommunicator::~NcclCommunicator() { release(*state_); }

void NcclCommunicator::abort(const std::string& reason) {
  state_->fail(reason);
  try {
    OnDevice on(state_->device);
    state_->abort_comm();
  } catch (const std::exception&) {
    // No device to select: NCCL cannot have anything running on it either.
  }
}

int NcclCommunicator::rank() const { return state_->rank; }
int NcclCommunicator::size() const { return state_->size; }
std::chrono::milliseconds NcclCommunicator::timeout() const { return state_->timeout; }
cudaStream_t NcclCommunicator::stream() const { return state_->stream; }
int NcclCommunicator::device() const { return state_->device; }
CommCounters NcclCommunicator::counters() const { return state_->counters; }
void NcclCommunicator::set_producer_stream(cudaStream_t producer) { state_->producer = producer; }

std::string NcclCommunicator::version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "unknown";
  // Since 2.9 the code is major*10000 + minor*100 + patch; before, major*1000 + minor*100 +
  // patch (2.8.4 is 2804), the libraries the minimum check exists to name.
  const bool old = code < 10000;
  return std::to_string(code / (old ? 1000 : 10000)) + "." +
         std::to_string(code / 100 % (old ? 10 : 100)) + "." + std::to_string(code % 100);
}

std::shared_ptr<Work> NcclCommunicator::issue(
    const char* operation, std::size_t count, std::uint64_t bytes_sent,
    std::uint64_t bytes_received, const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& call,
    const char* elements) {
  nccl::State& s = *state_;
  s.throw_if_failed();
  const std::uint64_t sequence = s.sequence++;
  const std::string what = std::string(operation) + " #" + std::to_string(sequence) + " (" +
                           std::to_string(count) + " " + elements + ")";
  if (count == 0) return nccl::make_work(state_, nullptr, what);
  OnDevice on(s.device);
  if (s.producer != nullptr) {
    // Hand-off by event: this stream waits on the device for the producer's work so far; the
    // host does not wait at all.
    check_cuda(cudaEventRecord(s.producer_done, s.producer), "cudaEventRecord", s);
    check_cuda(cudaStreamWaitEvent(s.stream, s.producer_done, 0), "cudaStreamWaitEvent", s);
  }
  const auto deadline = std::chrono::steady_clock::now() + s.timeout;
  const ncclResult_t result = settle(s, call(s.comm, s.stream), deadline);
  if (result != ncclSuccess) {
    const std::string message = "rank " + std::to_string(s.rank) + " (" + s.where() + ") during " +
                                what + ": " +
                                (result == ncclInProgress ? "NCCL did not accept the call in time"
                                                          : s.nccl_message(result));
    s.abort_comm();
    s.fail(message);
    throw Error(message);
  }
  cudaEvent_t done = nullptr;
  check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate", s);
  auto work = nccl::make_work(state_, done, what);  // owns the event from here
  check_cuda(cudaEventRecord(done, s.stream), "cudaEventRecord", s);
  s.counters.bytes_sent += bytes_sent;
  s.counters.bytes_received += bytes_received;
  ++s.counters.collectives;
  return work;
}

namespace {

// The buffer must be device memory of this communicator's device: NCCL would otherwise fail
// deep inside a kernel, or read host memory through a stale mapping.
void check_device_buffer(const void* data, std::size_t count, const char* operation,
                         const nccl::State& state) {
  if (count == 0) return;
  // Asked on the communicator's device: run with device 0 current, the query would create a
  // context on GPU 0 from a rank that has no business there.
  const OnDevice on(state.device);
  cudaPointerAttributes attributes{};
  const cudaError_t error = cudaPointerGetAttributes(&attributes, data);
  if (error != cudaSuccess) cudaGetLastError();
  const bool on_device =
      error == cudaSuccess &&
      (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged) &&
      attributes.device == state.device;
  if (!on_device) {
    throw Error(state.where() + ": " + operation + " was given a buffer that is not device " +
                "memory of cuda:" + std::to_string(state.device) +
                " (NcclCommunicator works on device buffers only)");
  }
}

// A reduce-scatter over one rank is a copy of the input, whatever the operation, made on the
// collective's stream; a CUDA failure throws naming the call. Not left to NCCL: 2.28.3 at world
// size 1 left the last value of a 2^20 + 1-value fp16 and bf16 reduce-scatter unwritten (an
// H200, test_nccl_communicator.cpp). Whether it does so across ranks is unchecked: that needs
// two GPUs, which no run has had.
ncclResult_t copy_one_rank(const void* in, void* out, std::size_t bytes, cudaStream_t stream,
                           const nccl::State& state) {
  if (in == out || bytes == 0) return ncclSuccess;
  check_cuda(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, stream),
             "cudaMemcpyAsync (one-rank reduce-scatter)", state);
  return ncclSuccess;
}

std::uint64_t ring_share(std::uint64_t bytes, int n, int factor) {
  return n <= 1 ? 0
                : bytes * static_cast<std::uint64_t>(factor) * static_cast<std::uint64_t>(n - 1) /
                      static_cast<std::uint64_t>(n);
}

}  // namespace

std::shared_ptr<Work> NcclCommunicator::allreduce_async(std::span<float> data, ReduceOp op) {
  return allreduce_into_async(data, data, op);
}

std::shared_ptr<Work> NcclCommunicator::allreduce_into_async(std::span<const float> in,
                                                             std::span<float> out, ReduceOp op) {
  check_allreduce_into_buffers(in.data(), in.size(), out.data(), out.size());
  check_device_buffer(in.data(), in.size(), "allreduce", *state_);
  check_device_buffer(out.data(), out.size(), "allreduce", *state_);
  const std::uint64_t moved = ring_share(out.size_bytes(), size(), 2);
  return issue("allreduce", out.size(), moved, moved, [&](ncclComm_t comm, cudaStream_t stream) {
    // sendbuff == recvbuff is NCCL's in place.
    return ncclAllReduce(in.data(), out.data(), out.size(), ncclFloat, nccl_op(op), comm, stream);
  });
}

std::shared_ptr<Work> NcclCommunicator::allreduce_half_async(std::span<std::uint16_t> data,
                                                             HalfType type, ReduceOp op) {
  check_device_buffer(data.data(), data.size(), "allreduce_half", *state_);
  const bool fp16 = type == HalfType::kFp16;
  const std::uint64_t moved = ring_share(data.size_bytes(), size(), 2);
  return issue(
      fp16 ? "allreduce fp16" : "allreduce bf16", data.size(), moved, moved,
      [&](ncclComm_t comm, cudaStream_t stream) {
        return ncclAllReduce(data.data(), data.data(), data.size(), fp16 ? ncclHalf : ncclBfloat16,
                             nccl_op(op), comm, stream);
      },
      fp16 ? "fp16 values" : "bf16 values");
}

std::shared_ptr<Work> NcclCommunicator::broadcast_async(std::span<float> data, int root) {
  GRADSYNC_CHECK(root >= 0 && root < size(), "broadcast root outside [0, size)");
  check_device_buffer(data.data(), data.size(), "broadcast", *state_);
  const std::uint64_t bytes = size() > 1 ? data.size_bytes() : 0;
  const bool is_root = rank() == root;
  return issue("broadcast", data.size(), is_root ? bytes : 0, is_root ? 0 : bytes,
               [&](ncclComm_t comm, cudaStream_t stream) {
                 return ncclBroadcast(data.data(), data.data(), data.size(), ncclFloat, root, comm,
                                      stream);
               });
}

std::shared_ptr<Work> NcclCommunicator::allgather_async(std::span<const float> in,
                                                        std::span<float> out) {
  GRADSYNC_CHECK(out.size() == in.size() * static_cast<std::size_t>(size()),
                 "allgather: out.size() != size() * in.size()");
  check_device_buffer(in.data(), in.size(), "allgather", *state_);
  check_device_buffer(out.data(), out.size(), "allgather", *state_);
  const std::uint64_t moved = ring_share(out.size_bytes(), size(), 1);
  return issue("allgather", out.size(), moved, moved, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllGather(in.data(), out.data(), in.size(), ncclFloat, comm, stream);
  });
}

std::shared_ptr<Work> NcclCommunicator::reduce_scatter_async(std::span<const float> in,
                                                             std::span<float> out, ReduceOp op) {
  GRADSYNC_CHECK(in.size() == out.size() * static_cast<std::size_t>(size()),
                 "reduce_scatter: in.size() must be size() * out.size(), but in has " +
                     std::to_string(in.size()) + " floats, out " + std::to_string(out.size()) +
                     ", over " + std::to_string(size()) + " ranks");
  check_device_buffer(in.data(), in.size(), "reduce_scatter", *state_);
  check_device_buffer(out.data(), out.size(), "reduce_scatter", *state_);
  const std::uint64_t moved = ring_share(in.size_bytes(), size(), 1);
  // ncclAvg as in allreduce_async: NCCL's own division (for floats it scales each rank's input
  // by 1/N before the sum), so a block equals the allreduce's only as far as NCCL orders both
  // sums alike; with one rank both are a copy.
  return issue("reduce_scatter", in.size(), moved, moved,
               [&](ncclComm_t comm, cudaStream_t stream) {
                 if (size() == 1)
                   return copy_one_rank(in.data(), out.data(), out.size_bytes(), stream, *state_);
                 return ncclReduceScatter(in.data(), out.data(), out.size(), ncclFloat, nccl_op(op),
                                          comm, stream);
               });
}

std::shared_ptr<Work> NcclCommunicator::reduce_scatter_half_async(std::span<const std::uint16_t> in,
                                                                  std::span<std::uint16_t> out,
                                                                  HalfType type, ReduceOp op) {
  check_reduce_scatter_half_sizes(in.size(), out.size(), size(), type);
  check_device_buffer(in.data(), in.size(), "reduce_scatter_half", *state_);
  check_device_buffer(out.data(), out.size(), "reduce_scatter_half", *state_);
  const bool fp16 = type == HalfType::kFp16;
  const std::uint64_t moved = ring_share(in.size_bytes(), size(), 1);
  return issue(
      fp16 ? "reduce_scatter fp16" : "reduce_scatter bf16", in.size(), moved, moved,
      [&](ncclComm_t comm, cudaStream_t stream) {
        if (size() == 1)
          return copy_one_rank(in.data(), out.data(), out.size_bytes(), stream, *state_);
        return ncclReduceScatter(in.data(), out.data(), out.size(), fp16 ? ncclHalf : ncclBfloat16,
                                 nccl_op(op), comm, stream);
      },
      fp16 ? "fp16 values" : "bf16 values");
}

std::shared_ptr<Work> NcclCommunicator::barrier_async() {
  // NCCL has no barrier: a one-float allreduce completes on no rank before every rank issued it.
  float* scratch = state_->barrier_scratch;
  return issue("barrier", 1, 0, 0, [scratch](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(scratch, scratch, 1, ncclFloat, ncclSum, comm, stream);
  });
}

std::shared_ptr<Work> NcclCommunicator::reduce_async(std::span<float> data, ReduceOp op, int root) {
  GRADSYNC_CHECK(root >= 0 && root < size(), "reduce root outside [0, size)");
  check_device_buffer(data.data(), data.size(), "reduce", *state_);
  const std::uint64_t bytes = size() > 1 ? data.size_bytes() : 0;
  const bool is_root = rank() == root;
  return issue("reduce", data.size(), is_root ? 0 : bytes,
               is_root ? bytes * static_cast<std::uint64_t>(size() - 1) : 0,
               [&](ncclComm_t comm, cudaStream_t stream) {
                 return ncclReduce(data.data(), data.data(), data.size(), ncclFloat, nccl_op(op),
                                   root, comm, stream);
               });
}

}  // namespace gradsync
