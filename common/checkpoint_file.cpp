#include "common/checkpoint_file.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/little_endian_file.h"

namespace gradsync {
namespace {

constexpr char kMagic[16] = {'g', 'r', 'a', 'd', 's', 'y', 'n', 'c', '-', 'c', 'k', 'p', 't'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kFixedBytes = 64;
constexpr std::size_t kMaxDescription = 4096;

using little_endian::crc32_of;
using little_endian::get;
using little_endian::put;

}  // namespace

std::string checkpoint_step_folder(const std::string& root, std::uint64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08llu", static_cast<unsigned long long>(step));
  return (std::filesystem::path(root) / name).string();
}

std::string checkpoint_part_name(int part, int parts) {
  return "part-" + std::to_string(part) + "-of-" + std::to_string(parts) + ".ckpt";
}

std::string encode_checkpoint_part(const CheckpointPart& part) {
  const std::uint64_t n = part.end - part.begin;
  GRADSYNC_CHECK(part.begin <= part.end && part.end <= part.total,
                 "checkpoint part range outside the model");
  GRADSYNC_CHECK(part.params.size() == n && part.momentum.size() == n,
                 "checkpoint part buffers do not match its range");
  GRADSYNC_CHECK(part.description.size() <= kMaxDescription, "model description too long");
  std::string out;
  out.reserve(kFixedBytes + part.description.size() + 8 * n + 4);
  out.append(kMagic, sizeof kMagic);
  put<std::uint32_t>(out, kVersion);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(part.description.size()));
  put<std::uint64_t>(out, part.step);
  put<std::uint64_t>(out, part.total);
  put<std::uint64_t>(out, part.begin);
  put<std::uint64_t>(out, part.end);
  put<std::uint64_t>(out, part.optimizer_steps);
  out += part.description;
  if (n > 0) {
    out.append(reinterpret_cast<const char*>(part.params.data()), n * sizeof(float));
    out.append(reinterpret_cast<const char*>(part.momentum.data()), n * sizeof(float));
  }
  put<std::uint32_t>(out, crc32_of(out.data(), out.size()));
  return out;
}

std::string write_checkpoint_settings(const std::string& step_folder, const std::string& settings) {
  try {
    write_file_atomically((std::filesystem::path(step_folder) / kCheckpointSettingsFile).string(),
                          settings);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

void write_checkpoint_part(const std::string& path, const CheckpointPart& part) {
  const std::string out = encode_checkpoint_part(part);
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!folder.empty()) std::filesystem::create_directories(folder, ec);
  if (ec) throw Error(folder.string() + ": cannot create checkpoint folder: " + ec.message());
  write_file_atomically(path, out);
}

CheckpointPart read_checkpoint_part(const std::string& path, bool header_only) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw DataError(path, std::string("cannot open checkpoint: ") + std::strerror(errno));
  std::string in;
  if (header_only) {
    in.resize(kFixedBytes + kMaxDescription);
    file.read(in.data(), static_cast<std::streamsize>(in.size()));
    in.resize(static_cast<std::size_t>(file.gcount()));
  } else {
    in.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  }
  if (file.bad()) throw DataError(path, "cannot read checkpoint");
  return parse_checkpoint_part(in, path, header_only);
}

CheckpointPart parse_checkpoint_part(std::string_view in, const std::string& path,
                                     bool header_only) {
  if (in.size() < sizeof kMagic || std::memcmp(in.data(), kMagic, sizeof kMagic) != 0) {
    throw DataError(path, "not a gradsync checkpoint (bad magic)");
  }
  if (in.size() < kFixedBytes) {
    throw DataError(path, "truncated: " + std::to_string(in.size()) +
                              " bytes, the header alone is " + std::to_string(kFixedBytes));
  }
  const auto version = get<std::uint32_t>(in, 16);
  if (version != kVersion) {
    throw DataError(path, "checkpoint format version " + std::to_string(version) +
                              ", this gradsync reads version " + std::to_string(kVersion));
  }
  CheckpointPart part;
  const auto description_bytes = get<std::uint32_t>(in, 20);
  part.step = get<std::uint64_t>(in, 24);
  part.total = get<std::uint64_t>(in, 32);
  part.begin = get<std::uint64_t>(in, 40);
  part.end = get<std::uint64_t>(in, 48);
  part.optimizer_steps = get<std::uint64_t>(in, 56);
  if (description_bytes > kMaxDescription || part.begin > part.end || part.end > part.total ||
      part.end - part.begin > (std::uint64_t{1} << 40)) {
    throw DataError(path, "corrupted header (range [" + std::to_string(part.begin) + ", " +
                              std::to_string(part.end) + ") of " + std::to_string(part.total) +
                              ", description " + std::to_string(description_bytes) + " bytes)");
  }
  const std::uint64_t n = part.end - part.begin;
  const std::uint64_t expected = kFixedBytes + description_bytes + 8 * n + 4;
  if (header_only) {
    if (in.size() < kFixedBytes + description_bytes) throw DataError(path, "truncated header");
    part.description = std::string(in.substr(kFixedBytes, description_bytes));
    return part;
  }
  if (in.size() != expected) {
    throw DataError(path, std::string(in.size() < expected ? "truncated" : "trailing bytes") +
                              ": " + std::to_string(in.size()) + " bytes, expected " +
                              std::to_string(expected));
  }
  const std::size_t body = in.size() - 4;
  if (crc32_of(in.data(), body) != get<std::uint32_t>(in, body)) {
    throw DataError(path, "corrupted: CRC-32 mismatch");
  }
  part.description = std::string(in.substr(kFixedBytes, description_bytes));
  const char* floats = in.data() + kFixedBytes + description_bytes;
  part.params.resize(n);
  part.momentum.resize(n);
  if (n > 0) {  // an empty range's vectors may have no storage at all: memcpy(nullptr) is UB
    std::memcpy(part.params.data(), floats, n * sizeof(float));
    std::memcpy(part.momentum.data(), floats + n * sizeof(float), n * sizeof(float));
  }
  return part;
}

}  // namespace gradsync
