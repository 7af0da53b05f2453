// libFuzzer target: the IDX reader (model/idx_reader.h), gzip-compressed or raw.
//
// read_idx() only takes a path, so each input is written to an in-memory file (memfd) and read
// back through /proc/self/fd/N: no disk traffic, no temp files left behind by a crash. An
// in-memory entry point (read_idx from a byte span) would be faster and would not need /proc;
// see fuzz/README.md. The reader must either throw DataError or return an array whose data
// holds exactly product(shape) bytes.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/error.h"
#include "fuzz/fuzz_support.h"
#include "model/idx_reader.h"

namespace {

// One memfd for the whole run, rewritten for each input; its path stays valid throughout.
class MemFile {
 public:
  MemFile() : fd_(memfd_create("gradsync_fuzz_idx", MFD_CLOEXEC)) {
    if (fd_ < 0) {
      std::fprintf(stderr, "memfd_create: %s\n", std::strerror(errno));
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  const std::string& write(const std::uint8_t* data, std::size_t size) {
    // A failure here is the harness's, not the reader's: abort rather than fuzz stale bytes.
    GRADSYNC_FUZZ_REQUIRE(ftruncate(fd_, 0) == 0, std::strerror(errno));
    std::size_t done = 0;
    while (done < size) {
      const ssize_t n = pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      GRADSYNC_FUZZ_REQUIRE(n > 0, std::strerror(errno));
      done += static_cast<std::size_t>(n);
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static MemFile file;
  const std::string& path = file.write(data, size);
  gradsync::fuzz::expect_only_gradsync_errors<gradsync::DataError>([&] {
    const gradsync::IdxArray array = gradsync::read_idx(path);
    std::uint64_t elements = 1;
    for (const std::uint32_t d : array.shape) elements *= d;  // read_idx bounds it by 2^40
    GRADSYNC_FUZZ_REQUIRE(array.shape.size() <= 255, "more dimensions than the header can say");
    GRADSYNC_FUZZ_REQUIRE(
        array.data.size() == elements,
        std::to_string(array.data.size()) + " bytes for " + std::to_string(elements) + " elements");
  });
  return 0;
}
