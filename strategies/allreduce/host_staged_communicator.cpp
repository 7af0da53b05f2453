#include "strategies/allreduce/host_staged_communicator.h"

#include <string>

#include "allreduce/collective_checks.h"
#include "common/error.h"
#ifdef GRADSYNC_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <span>

#include "allreduce/tcp/work_queue.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/cuda_device.h"
#include "model/cuda/cuda_handles.h"
#include "model/cuda/device_buffer.h"
#endif

namespace gradsync {

#ifdef GRADSYNC_HAVE_CUDA
namespace {

using std::chrono::milliseconds;
using Produced = std::shared_ptr<cuda::Event>;  // null: no producer stream to wait for

// How long past the host communicator's own deadline a Work::wait here still waits for that
// communicator's error, which names the late rank, before giving up with a message of its own:
// TcpRing collects the ranks' reports for up to 2 s after its deadline (Gloo for 1 s), and the
// copies before it start the host collective a little after this Work started.
milliseconds report_grace(milliseconds timeout) {
  return std::min(timeout, milliseconds(2000)) + milliseconds(3000);
}

cuda::Stream make_copy_stream(int device) {
  cuda::DeviceGuard on(device);
  return cuda::make_stream();
}

class HostStagedCommunicator final : public Communicator {
 public:
  HostStagedCommunicator(std::shared_ptr<Communicator> host, int device, cudaStream_t producer)
      : copies_(make_copy_stream(device)),
        host_(std::move(host)),
        device_(device),
        producer_(producer),
        me_("rank " + std::to_string(host_->rank()) +
            " (host-staged on cuda:" + std::to_string(device) + ")"),
        queue_(host_->rank(), host_->timeout(), report_grace(host_->timeout())) {}

  // Never waits on a peer: a collective still queued or running would otherwise hold the
  // staging thread until the host communicator's timeout, so the host communicator is aborted
  // (its running collective fails at once, and the queued ones here with it). Once the thread
  // is joined, no copy into a device buffer can happen any more.
  ~HostStagedCommunicator() override {
    if (last_ != nullptr && !last_->completed()) {
      try {
        host_->abort("its communicator was destroyed with collectives in flight");
      } catch (const std::exception&) {
        // Telling the peers failed (their Store is gone): the collective still fails here.
      }
    }
    queue_.stop();
  }

  HostStagedCommunicator(const HostStagedCommunicator&) = delete;
  HostStagedCommunicator& operator=(const HostStagedCommunicator&) = delete;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  milliseconds timeout() const override { return host_->timeout(); }
  CommCounters counters() const override { return host_->counters(); }
  std::string backend() const override { return host_->backend(); }
  void abort(const std::string& reason) override { host_->abort(reason); }

  std::shared_ptr<Work> allreduce_async(std::span<float> data, ReduceOp op) override {
    return allreduce_into_async(data, data, op);
  }

  // Out of place costs nothing more here: the input goes to host memory either way, and the
  // sum comes back into the output.
  std::shared_ptr<Work> allreduce_into_async(std::span<const float> in, std::span<float> data,
                                             ReduceOp op) override {
    check_allreduce_into_buffers(in.data(), in.size(), data.data(), data.size());
    check_buffer(in.data(), in.size(), "allreduce");
    check_buffer(data.data(), data.size(), "allreduce");
    const std::string what = std::string("allreduce ") + (op == ReduceOp::kAvg ? "avg" : "sum") +
                             " of " + std::to_string(data.size()) + " floats";
    return submit(what, [this, in, data, op, produced = mark_produced()](tcp::RingWork& work) {
      if (data.empty()) return finish(host_->allreduce_async({}, op));
      const std::span<float> host = staging(work, data.size());
      on_device(work, "copying to host", [&] {
        after_producer(produced);
        copy(host.data(), in.data(), in.size(), cudaMemcpyDeviceToHost);
      });
      finish(host_->allreduce_async(host, op));
      on_device(work, "copying back",
                [&] { copy(data.data(), host.data(), data.size(), cudaMemcpyHostToDevice); });
    });
  }

  // The 16-bit values staged as they are, 2 bytes each, and reduced by the host communicator's
  // allreduce_half (its rounding, its counters).
  std::shared_ptr<Work> allreduce_half_async(std::span<std::uint16_t> data, HalfType type,
                                             ReduceOp op) override {
    check_buffer(data.data(), data.size(), "allreduce_half");
    const std::string what = std::string("allreduce ") + half_type_name(type) +
                             (op == ReduceOp::kAvg ? " avg" : " sum") + " of " +
                             std::to_string(data.size()) + " values";
    return submit(what, [this, data, type, op, produced = mark_produced()](tcp::RingWork& work) {
      if (data.empty()) return finish(host_->allreduce_half_async({}, type, op));
      const std::span<std::uint16_t> host = staging_halves(work, data.size());
      on_device(work, "copying to host", [&] {
        after_producer(produced);
        copy_bytes(host.data(), data.data(), data.size_bytes(), cudaMemcpyDeviceToHost);
      });
      finish(host_->allreduce_half_async(host, type, op));
      on_device(work, "copying back", [&] {
        copy_bytes(data.data(), host.data(), data.size_bytes(), cudaMemcpyHostToDevice);
      });
    });
  }

  std::shared_ptr<Work> broadcast_async(std::span<float> data, int root) override {
    GRADSYNC_CHECK(root >= 0 && root < size(), "broadcast root outside [0, size)");
    check_buffer(data.data(), data.size(), "broadcast");
    const std::string what =
        "broadcast of " + std::to_string(data.size()) + " floats from rank " + std::to_string(root);
    return submit(what, [this, data, root, produced = mark_produced()](tcp::RingWork& work) {
      if (data.empty()) return finish(host_->broadcast_async({}, root));
      // The root's values leave, the others' are overwritten: one copy each way at most. The
      // others still wait for the producer, so that its writes land before ours.
      const bool sends = rank() == root;
      const std::span<float> host = staging(work, data.size());
      on_device(work, "copying to host", [&] {
        after_producer(produced);
        if (sends) copy(host.data(), data.data(), data.size(), cudaMemcpyDeviceToHost);
      });
      finish(host_->broadcast_async(host, root));
      if (sends) return;
      on_device(work, "copying back",
                [&] { copy(data.data(), host.data(), data.size(), cudaMemcpyHostToDevice); });
    });
  }

  std::shared_ptr<Work> allgather_async(std::span<const float> in, std::span<float> out) override {
    GRADSYNC_CHECK(out.size() == in.size() * static_cast<std::size_t>(size()),
                   "allgather: out.size() != size() * in.size()");
    check_buffer(in.data(), in.size(), "allgather");
    check_buffer(out.data(), out.size(), "allgather");
    const std::string what = "allgather of " + std::to_string(out.size()) + " floats";
    return submit(what, [this, in, out, produced = mark_produced()](tcp::RingWork& work) {
      if (out.empty()) return finish(host_->allgather_async({}, {}));
      // Staging holds this rank's input, then the gathered output after it.
      const std::span<float> host = staging(work, in.size() + out.size());
      const std::span<float> host_in = host.first(in.size());
      const std::span<float> host_out = host.subspan(in.size());
      on_device(work, "copying to host", [&] {
        after_producer(produced);
        copy(host_in.data(), in.data(), in.size(), cudaMemcpyDeviceToHost);
      });
      finish(host_->allgather_async(host_in, host_out));
      on_device(work, "copying back",
                [&] { copy(out.data(), host_out.data(), out.size(), cudaMemcpyHostToDevice); });
    });
  }

  std::shared_ptr<Work> reduce_scatter_async(std::span<const float> in, std::span<float> out,
                                             ReduceOp op) override {
    GRADSYNC_CHECK(in.size() == out.size() * static_cast<std::size_t>(size()),
                   "reduce_scatter: in.size() must be size() * out.size(), but in has " +
                       std::to_string(in.size()) + " floats, out " + std::to_string(out.size()) +
                       ", over " + std::to_string(size()) + " ranks");
    check_buffer(in.data(), in.size(), "reduce_scatter");
    check_buffer(out.data(), out.size(), "reduce_scatter");
    const std::string what = std::string("reduce-scatter ") +
                             (op == ReduceOp::kAvg ? "avg" : "sum") + " of " +
                             std::to_string(in.size()) + " floats";
    return submit(what, [this, in, out, op, produced = mark_produced()](tcp::RingWork& work) {
      // Still issued when empty: the host communicator's sequence stays the peers'.
      if (in.empty()) return finish(host_->reduce_scatter_async({}, {}, op));
      // Staging holds the whole input, then this rank's block of the result after it; only the
      // block comes back to the device.
      const std::span<float> host = staging(work, in.size() + out.size());
      const std::span<float> host_in = host.first(in.size());
      const std::span<float> host_out = host.subspan(in.size());
      on_device(work, "copying to host", [&] {
        after_producer(produced);
        copy(host_in.data(), in.data(), in.size(), cudaMemcpyDeviceToHost);
      });
      finish(host_->reduce_scatter_async(host_in, host_out, op));
      on_device(work, "copying back",
                [&] { copy(out.data(), host_out.data(), out.size(), cudaMemcpyHostToDevice); });
    });
  }

  // The whole 16-bit input staged, then this rank's block after it (2 bytes a value); the host
  // communicator's reduce_scatter_half reduces, and only the block comes back.
  std::shared_ptr<Work> reduce_scatter_half_async(std::span<const std::uint16_t> in,
                                                  std::span<std::uint16_t> out, HalfType type,
                                                  ReduceOp op) override {
    check_reduce_scatter_half_sizes(in.size(), out.size(), size(), type);
    check_buffer(in.data(), in.size(), "reduce_scatter_half");
    check_buffer(out.data(), out.size(), "reduce_scatter_half");
    const std::string what = std::string("reduce-scatter ") + half_type_name(type) +
                             (op == ReduceOp::kAvg ? " avg" : " sum") + " of " +
                             std::to_string(in.size()) + " values";
    return submit(what, [this, in, out, type, op, produced = mark_produced()](tcp::RingWork& work) {
      // Still issued when empty: the host communicator's sequence stays the peers'.
      if (in.empty()) return finish(host_->reduce_scatter_half_async({}, {}, type, op));
      const std::span<std::uint16_t> host = staging_halves(work, in.size() + out.size());
      const std::span<std::uint16_t> host_in = host.first(in.size());
      const std::span<std::uint16_t> host_out = host.subspan(in.size());
      on_device(work, "copying to host", [&] {
        after_producer(produced);
        copy_bytes(host_in.data(), in.data(), in.size_bytes(), cudaMemcpyDeviceToHost);
      });
      finish(host_->reduce_scatter_half_async(host_in, host_out, type, op));
      on_device(work, "copying back", [&] {
        copy_bytes(out.data(), host_out.data(), out.size_bytes(), cudaMemcpyHostToDevice);
      });
    });
  }

  // Through the staging thread like the rest: forwarded at once, it could reach the host
  // communicator before collectives issued earlier, and the ranks' sequences would differ.
  std::shared_ptr<Work> barrier_async() override {
    return submit("barrier", [this](tcp::RingWork&) { finish(host_->barrier_async()); });
  }

 private:
  std::shared_ptr<Work> submit(const std::string& description, tcp::WorkQueue::Task task) {
    last_ = queue_.submit(description, std::move(task));
    return last_;
  }

  // Same check as the NCCL communicator's: a host pointer here would otherwise fail deep in a
  // copy, on the staging thread, with a message that names neither the caller nor the buffer.
  void check_buffer(const void* data, std::size_t count, const char* operation) const {
    if (count == 0) return;
    cuda::DeviceGuard on(device_);
    cudaPointerAttributes attributes{};
    const cudaError_t error = cudaPointerGetAttributes(&attributes, data);
    if (error != cudaSuccess) cudaGetLastError();
    const bool on_device =
        error == cudaSuccess &&
        (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged) &&
        attributes.device == device_;
    if (!on_device) {
      throw Error(me_ + ": " + operation +
                  " was given a buffer that is not device memory of cuda:" +
                  std::to_string(device_) + " (this communicator stages device buffers; give " +
                  "host buffers to the host communicator itself)");
    }
  }

  // At issue time, on the caller's thread: an event after everything enqueued on the producer
  // so far (for a bucket: its layer's gradient kernels), for the staging thread to wait on.
  Produced mark_produced() const {
    if (producer_ == nullptr) return nullptr;
    cuda::DeviceGuard on(device_);
    auto event = std::make_shared<cuda::Event>(cuda::make_event());
    GRADSYNC_CUDA_CHECK(cudaEventRecord(event->get(), producer_));
    return event;
  }

  // The rest runs on the staging thread (the queue's), one collective at a time.

  // CUDA errors of the staging say whose and which collective; the host communicator's errors
  // are thrown by finish(), outside, and pass unchanged (a TimeoutError stays one).
  template <typename Body>
  void on_device(const tcp::RingWork& work, const char* step, Body&& body) {
    try {
      cuda::DeviceGuard on(device_);  // the current device is per thread
      body();
      GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(copies_.get()));
    } catch (const Error& e) {
      throw Error(me_ + " during " + work.what() + ", " + step + ": " + e.what());
    }
  }

  // Pinned memory for `count` floats, kept from one collective to the next: the first, the
  // broadcast of the parameters, is the largest a training run issues, so it rarely grows.
  std::span<float> staging(const tcp::RingWork& work, std::size_t count) {
    if (staging_.size() < count) {
      on_device(work, "allocating pinned host memory", [&] {
        staging_ = cuda::PinnedBuffer<float>();  // the old buffer goes first: no two at once
        staging_ = cuda::PinnedBuffer<float>(count);
      });
    }
    return staging_.span().first(count);
  }

  // The same pinned memory holding `count` 16-bit values (cudaMallocHost's storage has no type
  // of its own: each collective stages whatever it moves there).
  std::span<std::uint16_t> staging_halves(const tcp::RingWork& work, std::size_t count) {
    const std::span<float> room =
        staging(work, (count * sizeof(std::uint16_t) + sizeof(float) - 1) / sizeof(float));
    return {reinterpret_cast<std::uint16_t*>(room.data()), count};
  }

  // Everything enqueued on the copy stream from here on waits for the producer's event: the
  // device-to-host copy reads what the producer wrote, and a copy back (a broadcast's receiver)
  // lands after the producer's own writes.
  void after_producer(const Produced& produced) {
    if (produced) GRADSYNC_CUDA_CHECK(cudaStreamWaitEvent(copies_.get(), produced->get(), 0));
  }

  void copy(float* to, const float* from, std::size_t count, cudaMemcpyKind kind) {
    copy_bytes(to, from, count * sizeof(float), kind);
  }
  void copy_bytes(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind) {
    GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, kind, copies_.get()));
  }

  // The host collective on the staging buffer, waited for with the host communicator's timeout.
  void finish(const std::shared_ptr<Work>& host_work) { host_work->wait(host_->timeout()); }

  // Destroyed in reverse: the queue's thread stops first, then the host communicator (which
  // ends any collective of its own still writing to the staging buffer), then the copy stream
  // (synchronised), and the pinned memory last.
  cuda::PinnedBuffer<float> staging_;  // staging thread only
  cuda::Stream copies_;
  std::shared_ptr<Communicator> host_;
  const int device_;
  const cudaStream_t producer_;
  const std::string me_;
  std::shared_ptr<Work> last_;  // the latest issued (issuing thread only): done means all done
  tcp::WorkQueue queue_;        // last: its thread starts after every member above exists
};

}  // namespace
#endif

std::shared_ptr<Communicator> make_host_staged_communicator(std::shared_ptr<Communicator> host,
                                                            int device,
                                                            CUstream_st* producer_stream) {
  GRADSYNC_CHECK(host != nullptr, "a host-staged communicator needs a host communicator");
#ifdef GRADSYNC_HAVE_CUDA
  cuda::require_device(device, "host-staged communicator");
  return std::make_shared<HostStagedCommunicator>(std::move(host), device, producer_stream);
#else
  (void)producer_stream;
  throw Error("communicator for CUDA device " + std::to_string(device) +
              ": this gradsync was built without CUDA");
#endif
}

}  // namespace gradsync
