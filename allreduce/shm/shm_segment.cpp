#include "allreduce/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "common/error.h"
#include "common/run_id.h"

namespace gradsync {
namespace {

std::string reason() { return std::strerror(errno); }

std::byte* map(int fd, std::size_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw Error("shared memory " + name + ": mmap: " + reason());
  return static_cast<std::byte*>(p);
}

constexpr const char* kPrefix = "gradsync-";

}  // namespace

ShmSegment::ShmSegment(std::string name, std::byte* data, std::size_t size, bool owner)
    : name_(std::move(name)), data_(data), size_(size), linked_(owner) {}

ShmSegment ShmSegment::create(const std::string& name, std::size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw Error("shared memory " + name + ": cannot create it: " + reason());
  // posix_fallocate, not ftruncate: a /dev/shm too small for the segment fails here, with a
  // reason, instead of as SIGBUS at the first touch of a page that has no backing.
  const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw Error("shared memory " + name + ": cannot reserve " + std::to_string(bytes >> 20) +
                " MiB in /dev/shm: " + std::strerror(err));
  }
  std::byte* data = nullptr;
  try {
    data = map(fd, bytes, name);
  } catch (...) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw;
  }
  ::close(fd);
  return ShmSegment(name, data, bytes, true);
}

ShmSegment ShmSegment::open(const std::string& name, std::size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) throw Error("shared memory " + name + ": cannot open it: " + reason());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < bytes) {
    ::close(fd);
    throw Error("shared memory " + name + ": holds " + std::to_string(st.st_size) +
                " bytes, expected " + std::to_string(bytes) + " (another run's segment?)");
  }
  std::byte* data = nullptr;
  try {
    data = map(fd, bytes, name);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return ShmSegment(name, data, bytes, false);
}

ShmSegment::~ShmSegment() {
  if (data_ != nullptr) ::munmap(data_, size_);
  unlink();
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept { *this = std::move(other); }

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    unlink();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    linked_ = std::exchange(other.linked_, false);
  }
  return *this;
}

void ShmSegment::unlink() {
  if (!linked_) return;
  ::shm_unlink(name_.c_str());
  linked_ = false;
}

std::string shm_segment_name(std::uint64_t run_id) {
  static std::atomic<unsigned> counter{0};
  return "/" + std::string(kPrefix) + run_id_text(run_id) + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter++);
}

int remove_run_segments(std::uint64_t run_id) {
  const std::string prefix = std::string(kPrefix) + run_id_text(run_id) + "-";
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && ::shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace gradsync
