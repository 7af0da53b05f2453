#include "common/checkpoint_buffers.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/little_endian_file.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[16] = {'g', 'r', 'a', 'd', 's', 'y', 'n', 'c', '-', 'b', 'u', 'f', 's'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kFixedBytes = 40;
constexpr std::size_t kMaxDescription = 4096;
constexpr std::uint64_t kMaxValues = std::uint64_t{1} << 36;  // 256 GiB: a corrupted count

using little_endian::crc32_of;
using little_endian::get;
using little_endian::put;

}  // namespace

std::string encode_checkpoint_buffers(const CheckpointBuffers& buffers) {
  GRADSYNC_CHECK(buffers.description.size() <= kMaxDescription, "model description too long");
  const std::uint64_t n = buffers.values.size();
  std::string out;
  out.reserve(kFixedBytes + buffers.description.size() + 4 * n + 4);
  out.append(kMagic, sizeof kMagic);
  put<std::uint32_t>(out, kVersion);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(buffers.description.size()));
  put<std::uint64_t>(out, buffers.step);
  put<std::uint64_t>(out, n);
  out += buffers.description;
  if (n > 0) out.append(reinterpret_cast<const char*>(buffers.values.data()), n * sizeof(float));
  put<std::uint32_t>(out, crc32_of(out.data(), out.size()));
  return out;
}

CheckpointBuffers parse_checkpoint_buffers(std::string_view in, const std::string& name) {
  if (in.size() < sizeof kMagic || std::memcmp(in.data(), kMagic, sizeof kMagic) != 0) {
    throw DataError(name, "not a gradsync buffers file (bad magic)");
  }
  if (in.size() < kFixedBytes) {
    throw DataError(name, "truncated: " + std::to_string(in.size()) +
                              " bytes, the header alone is " + std::to_string(kFixedBytes));
  }
  const auto version = get<std::uint32_t>(in, 16);
  if (version != kVersion) {
    throw DataError(name, "buffers format version " + std::to_string(version) +
                              ", this gradsync reads version " + std::to_string(kVersion));
  }
  const auto description_bytes = get<std::uint32_t>(in, 20);
  CheckpointBuffers buffers;
  buffers.step = get<std::uint64_t>(in, 24);
  const auto n = get<std::uint64_t>(in, 32);
  if (description_bytes > kMaxDescription || n > kMaxValues) {
    throw DataError(name, "corrupted header (" + std::to_string(n) + " values, description " +
                              std::to_string(description_bytes) + " bytes)");
  }
  const std::uint64_t expected = kFixedBytes + description_bytes + 4 * n + 4;
  if (in.size() != expected) {
    throw DataError(name, std::string(in.size() < expected ? "truncated" : "trailing bytes") +
                              ": " + std::to_string(in.size()) + " bytes, expected " +
                              std::to_string(expected));
  }
  const std::size_t body = in.size() - 4;
  if (crc32_of(in.data(), body) != get<std::uint32_t>(in, body)) {
    throw DataError(name, "corrupted: CRC-32 mismatch");
  }
  buffers.description = std::string(in.substr(kFixedBytes, description_bytes));
  buffers.values.resize(n);
  if (n > 0) {
    std::memcpy(buffers.values.data(), in.data() + kFixedBytes + description_bytes,
                n * sizeof(float));
  }
  return buffers;
}

void write_checkpoint_buffers(const std::string& step_folder, const CheckpointBuffers& buffers) {
  const std::string out = encode_checkpoint_buffers(buffers);
  std::error_code ec;
  fs::create_directories(step_folder, ec);
  if (ec) throw Error(step_folder + ": cannot create checkpoint folder: " + ec.message());
  write_file_atomically((fs::path(step_folder) / kCheckpointBuffersFile).string(), out);
}

std::optional<CheckpointBuffers> read_checkpoint_buffers(const std::string& step_folder) {
  const std::string path = (fs::path(step_folder) / kCheckpointBuffersFile).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  std::ifstream file(path, std::ios::binary);
  if (!file) throw DataError(path, std::string("cannot open: ") + std::strerror(errno));
  const std::string in((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (file.bad()) throw DataError(path, "cannot read");
  return parse_checkpoint_buffers(in, path);
}

}  // namespace gradsync
