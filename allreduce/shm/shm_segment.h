// ShmSegment: one POSIX shared-memory segment mapped into this process, for the ranks of one
// host (allreduce/shm/shm_communicator.h).
//
//   auto seg = ShmSegment::create(shm_segment_name(run_id), bytes);   // rank 0: O_EXCL, zeroed
//   auto seg = ShmSegment::open(name, bytes);                         // the others
//   seg.unlink();       // once every rank has mapped it: the name goes, the mapping stays
//
// The name lives in /dev/shm until unlink(): rank 0 removes it as soon as every rank has mapped
// the segment, so a rank killed after that leaves nothing behind (the kernel frees the memory
// with the last mapping). For the window before, names start with "gradsync-<run id>-", and
// the launcher removes what a run left (remove_run_segments). Every error throws
// gradsync::Error naming the segment and the system's reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gradsync {

class ShmSegment {
 public:
  static ShmSegment create(const std::string& name, std::size_t bytes);
  static ShmSegment open(const std::string& name, std::size_t bytes);
  ShmSegment() = default;
  ~ShmSegment();
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // Removes the name (not the mapping); harmless when already gone.
  void unlink();

 private:
  ShmSegment(std::string name, std::byte* data, std::size_t size, bool owner);
  std::string name_;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool linked_ = false;  // this process created the name and has not removed it yet
};

// "/gradsync-<run id hex>-<pid>-<n>": unique on this host, and found by its run id.
std::string shm_segment_name(std::uint64_t run_id);
// Removes every /dev/shm/gradsync-<run id>-* (what ranks killed before the unlink left);
// returns how many. Errors are ignored: this is cleanup after the run is over.
int remove_run_segments(std::uint64_t run_id);

}  // namespace gradsync
