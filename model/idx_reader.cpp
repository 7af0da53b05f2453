#include "model/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>

#include "common/error.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;

constexpr std::uint8_t kUnsignedByteType = 0x08;
// gzread takes an unsigned int length, and growing the buffer in bounded chunks keeps a
// corrupt header claiming terabytes from allocating them before the short read is noticed.
constexpr std::size_t kReadChunk = std::size_t{1} << 26;
// Far beyond any real IDX file; only here so the size product cannot overflow.
constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 40;

std::string hex(std::uint64_t value, int digits) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "0x%0*llX", digits, static_cast<unsigned long long>(value));
  return buffer;
}

const char* idx_type_name(std::uint8_t type) {
  static constexpr const char* kNames[] = {"unsigned byte", "signed byte", "unknown type", "short",
                                           "int",           "float",       "double"};
  return type >= 0x08 && type <= 0x0E ? kNames[type - 0x08] : "unknown type";
}

std::string shape_string(const std::vector<std::uint32_t>& shape) {
  std::string out;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += "x";
    out += std::to_string(shape[i]);
  }
  return out.empty() ? "scalar" : out;
}

std::uint32_t big_endian_u32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

// Owns a gzFile and turns zlib's error reporting into DataError. A gzip stream that stops
// early is not an error here: zlib hands back what it decoded, and the caller reports the
// short count together with truncated_gzip() so the message can say expected vs got.
class IdxFile {
 public:
  explicit IdxFile(const std::string& path) : path_(path) {
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (!fs::exists(status)) throw DataError(path, "file not found");
    if (fs::is_directory(status)) throw DataError(path, "is a directory, expected an IDX file");
    file_ = gzopen(path.c_str(), "rb");
    if (file_ == nullptr) {
      throw DataError(path, std::string("cannot open: ") + std::strerror(errno));
    }
    gzbuffer(file_, 1 << 20);  // the default 8 KiB costs noticeably on 26 MB files
  }
  ~IdxFile() {
    if (file_ != nullptr) gzclose(file_);
  }
  IdxFile(const IdxFile&) = delete;
  IdxFile& operator=(const IdxFile&) = delete;

  // Reads up to `count` bytes; fewer only at end of input.
  std::size_t read(std::uint8_t* destination, std::size_t count) {
    std::size_t total = 0;
    while (total < count) {
      const auto want = static_cast<unsigned>(std::min(count - total, kReadChunk));
      const int got = gzread(file_, destination + total, want);
      total += static_cast<std::size_t>(std::max(got, 0));
      if (got < 0 || static_cast<unsigned>(got) < want) break;
    }
    int code = Z_OK;
    std::string message = gzerror(file_, &code);
    // zlib prefixes its messages with the path, which DataError adds already.
    if (message.starts_with(path_ + ": ")) message.erase(0, path_.size() + 2);
    if (code == Z_ERRNO) throw DataError(path_, "read error: " + message);
    if (code != Z_OK && code != Z_BUF_ERROR) {
      throw DataError(path_, "corrupt gzip data: " + message);
    }
    return total;
  }

  bool truncated_gzip() const {
    int code = Z_OK;
    gzerror(file_, &code);
    return code == Z_BUF_ERROR;
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
};

std::string gzip_note(const IdxFile& file) {
  return file.truncated_gzip() ? " (the gzip stream ends early)" : "";
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  IdxFile file(path);

  std::array<std::uint8_t, 4> magic{};
  const std::size_t magic_got = file.read(magic.data(), magic.size());
  if (magic_got < magic.size()) {
    throw DataError(path, "truncated: expected a 4-byte magic number, got " +
                              std::to_string(magic_got) + " bytes" + gzip_note(file));
  }
  if (magic[0] != 0 || magic[1] != 0) {
    throw DataError(path, "wrong magic " + hex(big_endian_u32(magic.data()), 8) +
                              ": expected 0x0000 followed by a type byte and a dimension count "
                              "(0x00000803 for images, 0x00000801 for labels); not an IDX file");
  }
  if (magic[2] != kUnsignedByteType) {
    throw DataError(path, "unsupported IDX data type " + hex(magic[2], 2) + " (" +
                              idx_type_name(magic[2]) +
                              "): only 0x08 (unsigned byte) is supported");
  }

  const int ndims = magic[3];
  std::vector<std::uint8_t> dims(4 * static_cast<std::size_t>(ndims));
  const std::size_t dims_got = file.read(dims.data(), dims.size());
  if (dims_got < dims.size()) {
    throw DataError(path, "truncated: expected " + std::to_string(dims.size()) +
                              " bytes of dimension sizes for " + std::to_string(ndims) +
                              " dimensions, got " + std::to_string(dims_got) + gzip_note(file));
  }

  IdxArray array;
  std::uint64_t elements = 1;
  for (int d = 0; d < ndims; ++d) {
    array.shape.push_back(big_endian_u32(dims.data() + 4 * d));
    // Compared before multiplying: a product past 2^64 would wrap and look small.
    const std::uint64_t dim = array.shape.back();
    if (dim != 0 && elements > kMaxElements / dim) {
      throw DataError(path, "implausible shape " + shape_string(array.shape) +
                                " (more than 2^40 elements); the header is probably corrupt");
    }
    elements *= dim;
  }

  const std::size_t header_bytes = 4 + dims.size();
  const auto expected = static_cast<std::size_t>(elements);
  std::size_t got = 0;
  while (got < expected) {
    const std::size_t step = std::min(expected - got, kReadChunk);
    array.data.resize(got + step);
    const std::size_t n = file.read(array.data.data() + got, step);
    got += n;
    if (n < step) break;
  }
  if (got < expected) {
    throw DataError(path, "truncated: expected " + std::to_string(expected) +
                              " data bytes after the " + std::to_string(header_bytes) +
                              "-byte header (shape " + shape_string(array.shape) + "), got " +
                              std::to_string(got) + gzip_note(file));
  }

  // Reading one byte past the data also makes zlib verify the gzip trailer (CRC and length).
  std::uint8_t extra = 0;
  if (file.read(&extra, 1) != 0) {
    throw DataError(path, "has data after the " + std::to_string(expected) +
                              " bytes its header (shape " + shape_string(array.shape) +
                              ") announces");
  }
  if (file.truncated_gzip()) {
    throw DataError(path,
                    "truncated: the data is complete but the gzip stream ends before its "
                    "trailer, so its checksum cannot be verified");
  }
  return array;
}

namespace {

std::string find_file(const fs::path& dir, const std::string& name) {
  for (const std::string& candidate : {name, name + ".gz"}) {
    const fs::path path = dir / candidate;
    std::error_code ec;
    if (fs::exists(path, ec)) return path.string();
  }
  throw DataError((dir / name).string() + "[.gz]",
                  "file not found (looked for " + name + " and " + name + ".gz)");
}

struct Split {
  std::string images_path;
  std::string labels_path;
  IdxArray images;
  IdxArray labels;
};

Split read_split(const fs::path& dir, const std::string& prefix) {
  Split split;
  split.images_path = find_file(dir, prefix + "-images-idx3-ubyte");
  split.labels_path = find_file(dir, prefix + "-labels-idx1-ubyte");
  split.images = read_idx(split.images_path);
  split.labels = read_idx(split.labels_path);
  if (split.images.shape.size() != 3) {
    throw DataError(split.images_path,
                    "wrong dimensionality: images must be 3-d (count x rows x "
                    "cols), found " +
                        std::to_string(split.images.shape.size()) + "-d (" +
                        shape_string(split.images.shape) + ")");
  }
  if (split.labels.shape.size() != 1) {
    throw DataError(split.labels_path, "wrong dimensionality: labels must be 1-d, found " +
                                           std::to_string(split.labels.shape.size()) + "-d (" +
                                           shape_string(split.labels.shape) + ")");
  }
  if (split.images.shape[0] != split.labels.shape[0]) {
    throw DataError(split.labels_path, "count mismatch: " + std::to_string(split.labels.shape[0]) +
                                           " labels but " + split.images_path + " has " +
                                           std::to_string(split.images.shape[0]) + " images");
  }
  if (split.images.shape[0] == 0) throw DataError(split.images_path, "contains no images");
  return split;
}

Dataset to_dataset(Split& split, const std::string& name, int classes,
                   const std::array<float, 256>& standardised) {
  Dataset dataset;
  dataset.name = name;
  dataset.size = split.images.shape[0];
  dataset.dim = static_cast<int>(split.images.shape[1] * split.images.shape[2]);
  dataset.classes = classes;
  dataset.features.resize(split.images.data.size());
  std::transform(split.images.data.begin(), split.images.data.end(), dataset.features.begin(),
                 [&](std::uint8_t byte) { return standardised[byte]; });
  dataset.labels.assign(split.labels.data.begin(), split.labels.data.end());
  split.images.data = {};  // the raw bytes are no longer needed; free them early
  return dataset;
}

}  // namespace

TrainTest load_mnist_dir(const std::string& dir) {
  fs::path root(dir);
  // "dir/" has an empty filename; the dataset name should still be "dir".
  if (!root.has_filename() && root.has_parent_path()) root = root.parent_path();
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    std::string problem = fs::exists(root, ec) ? "is not a directory" : "directory not found";
    if (root == fs::path(kFashionMnistDir)) {
      problem += "; install Fashion-MNIST with `apt-get install dataset-fashion-mnist`";
    }
    throw DataError(dir, problem);
  }

  Split train = read_split(root, "train");
  Split test = read_split(root, "t10k");
  const std::vector<std::uint32_t> image_shape(train.images.shape.begin() + 1,
                                               train.images.shape.end());
  if (!std::equal(image_shape.begin(), image_shape.end(), test.images.shape.begin() + 1)) {
    throw DataError(test.images_path,
                    "image size " + shape_string({test.images.shape[1], test.images.shape[2]}) +
                        " differs from the training images' " + shape_string(image_shape));
  }
  const std::uint64_t pixels = std::uint64_t{image_shape[0]} * image_shape[1];
  if (pixels == 0 || pixels > std::numeric_limits<int>::max()) {
    throw DataError(train.images_path, "unusable image size " + shape_string(image_shape));
  }

  int max_label = 0;
  for (const Split* split : {&train, &test}) {
    const auto it = std::max_element(split->labels.data.begin(), split->labels.data.end());
    if (it != split->labels.data.end()) max_label = std::max(max_label, int{*it});
  }
  if (max_label < 1) {
    throw DataError(train.labels_path, "label values: every label is 0, need at least 2 classes");
  }

  // A histogram gives the exact training mean and variance with one cheap pass.
  std::array<std::uint64_t, 256> histogram{};
  for (const std::uint8_t byte : train.images.data) ++histogram[byte];
  double count = 0, sum = 0;
  for (int v = 0; v < 256; ++v) {
    count += static_cast<double>(histogram[v]);
    sum += static_cast<double>(histogram[v]) * (v / 255.0);
  }
  const double mean = sum / count;
  double squares = 0;
  for (int v = 0; v < 256; ++v) {
    const double d = v / 255.0 - mean;
    squares += static_cast<double>(histogram[v]) * d * d;
  }
  const double stddev = std::sqrt(squares / count);
  if (!(stddev > 0)) {
    throw DataError(train.images_path, "every pixel has the same value; cannot standardise");
  }
  std::array<float, 256> standardised{};
  for (int v = 0; v < 256; ++v) standardised[v] = static_cast<float>((v / 255.0 - mean) / stddev);

  const std::string dirname = root.filename().string();
  const int classes = max_label + 1;
  TrainTest result;
  result.train = to_dataset(train, dirname + "/train", classes, standardised);
  result.test = to_dataset(test, dirname + "/test", classes, standardised);
  return result;
}

}  // namespace gradsync
