// The shared-memory segment of one ShmCommunicator (shm_communicator.h), as every rank maps it:
//
//   [Header][pad to a page][RankCell x N][pad to a page][set 0: slot 0 .. slot N-1, result]
//                                                        [set 1: slot 0 .. slot N-1, result]
//
// Header: the layout's identity (magic, ranks, chunk, the build's struct sizes) and the abort
// record. RankCell: one rank's barrier counter (the futex word the others sleep on), its pid,
// its progress and what collective it says it is in. Each slot and result area holds one chunk;
// consecutive chunk steps alternate the two sets, so a rank may fill the next set while a slower
// one still reads the last. ShmLayout reads these at fixed offsets of a mapping. Internal to
// allreduce/shm/.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gradsync::shm {

inline constexpr std::uint64_t kMagic = 0x3130306d73737267ull;  // "grssm001"
inline constexpr std::size_t kPage = 4096;
inline constexpr std::size_t kReasonBytes = 1024;

// What a rank says it is doing, for the desync check: written before the collective's first
// barrier, read by the others after it. Two, by sequence parity: a rank may already describe
// its next collective while a slower one still reads this one.
struct Descriptor {
  std::uint64_t seq = 0;
  std::uint64_t count = 0;
  std::uint32_t op = 0;
  std::int32_t root = 0;
  bool operator==(const Descriptor&) const = default;
};

struct alignas(128) RankCell {
  std::atomic<std::uint32_t> phase;     // barriers passed: the futex word others sleep on
  std::atomic<std::uint32_t> sleepers;  // ranks asleep on `phase`: wake only when there are
  std::atomic<std::int32_t> pid;
  std::atomic<std::uint64_t> started;  // last collective sequence number begun, and finished
  std::atomic<std::uint64_t> finished;
  Descriptor current[2];
};

struct Header {
  std::uint64_t magic;
  std::uint32_t ranks;
  std::uint64_t chunk_bytes;
  // 0: running; 1: a rank is writing its reason; 2: the reason is there.
  std::atomic<std::uint32_t> aborted;
  std::int32_t aborted_by;     // the rank that recorded the reason
  std::int32_t culprit;        // the rank the reason blames (waited for, dead, in desync)
  std::uint32_t header_bytes;  // sizeof(Header) and sizeof(RankCell) of the build that made
  std::uint32_t cell_bytes;    // the segment: two builds must agree on the layout
  char reason[kReasonBytes];
};

// Wrap-safe "counter a has reached b".
inline bool reached(std::uint32_t a, std::uint32_t b) {
  return static_cast<std::int32_t>(a - b) >= 0;
}

// The segment of `ranks` ranks and chunks of `chunk_floats` floats, mapped at `base`.
class ShmLayout {
 public:
  ShmLayout() = default;
  ShmLayout(std::byte* base, int ranks, std::size_t chunk_floats)
      : base_(base), ranks_(static_cast<std::size_t>(ranks)), chunk_floats_(chunk_floats) {}

  // How many bytes such a segment takes.
  static std::size_t bytes(int ranks, std::size_t chunk_floats) {
    return data_offset(static_cast<std::size_t>(ranks)) +
           2 * (static_cast<std::size_t>(ranks) + 1) * chunk_floats * sizeof(float);
  }

  bool mapped() const { return base_ != nullptr; }
  Header& header() const { return *reinterpret_cast<Header*>(base_); }
  std::byte* cell_address(int r) const {
    return base_ + cells_offset() + sizeof(RankCell) * static_cast<std::size_t>(r);
  }
  RankCell& cell(int r) const { return *reinterpret_cast<RankCell*>(cell_address(r)); }
  // Set s (0 or 1): slots 0..N-1 (one per rank), then the result area.
  float* area(int set, int index) const {
    const std::size_t n = static_cast<std::size_t>(set) * (ranks_ + 1) +
                          static_cast<std::size_t>(index);
    return reinterpret_cast<float*>(base_ + data_offset(ranks_)) + n * chunk_floats_;
  }
  float* slot(int set, int r) const { return area(set, r); }
  // The same slot holding 16-bit values: twice as many as floats.
  std::uint16_t* half_slot(int set, int r) const {
    return reinterpret_cast<std::uint16_t*>(area(set, r));
  }
  float* result(int set) const { return area(set, static_cast<int>(ranks_)); }

 private:
  static std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
  static std::size_t cells_offset() { return round_up(sizeof(Header), kPage); }
  static std::size_t data_offset(std::size_t ranks) {
    return round_up(cells_offset() + sizeof(RankCell) * ranks, kPage);
  }

  std::byte* base_ = nullptr;
  std::size_t ranks_ = 0;
  std::size_t chunk_floats_ = 0;
};

}  // namespace gradsync::shm
