#include <doctest/doctest.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/idx_reader.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using gradsync::DataError;
using gradsync::testing::TempDir;

namespace {

std::vector<std::uint8_t> idx_bytes(std::uint8_t type, const std::vector<std::uint32_t>& shape,
                                    const std::vector<std::uint8_t>& data) {
  std::vector<std::uint8_t> out = {0, 0, type, static_cast<std::uint8_t>(shape.size())};
  for (const std::uint32_t d : shape) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back((d >> shift) & 0xFF);
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_plain(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

void write_gzip(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  REQUIRE(gzclose(file) == Z_OK);
}

std::vector<std::uint8_t> iota_bytes(std::size_t n, std::uint8_t start = 0) {
  std::vector<std::uint8_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::uint8_t>(start + 7 * i);
  return out;
}

// The DataError message `f` throws; fails the test when it throws nothing.
template <class F>
std::string data_error_of(F&& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  FAIL("expected a gradsync::DataError");
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A small MNIST-format directory: `train` and `test` samples of 2x3 images.
void write_mnist_dir(const TempDir& dir, int train, int test, bool gzip_train) {
  auto write = gzip_train ? write_gzip : write_plain;
  const auto n_train = static_cast<std::uint32_t>(train);
  const auto n_test = static_cast<std::uint32_t>(test);
  write(dir.file(gzip_train ? "train-images-idx3-ubyte.gz" : "train-images-idx3-ubyte"),
        idx_bytes(0x08, {n_train, 2, 3}, iota_bytes(6 * n_train)));
  std::vector<std::uint8_t> train_labels(n_train);
  for (std::uint32_t i = 0; i < n_train; ++i) train_labels[i] = static_cast<std::uint8_t>(i % 3);
  write(dir.file(gzip_train ? "train-labels-idx1-ubyte.gz" : "train-labels-idx1-ubyte"),
        idx_bytes(0x08, {n_train}, train_labels));
  write_plain(dir.file("t10k-images-idx3-ubyte"),
              idx_bytes(0x08, {n_test, 2, 3}, iota_bytes(6 * n_test, 100)));
  std::vector<std::uint8_t> test_labels(n_test, 4);
  write_plain(dir.file("t10k-labels-idx1-ubyte"), idx_bytes(0x08, {n_test}, test_labels));
}

}  // namespace

TEST_CASE("read_idx reads plain and gzip files exactly") {
  TempDir dir;
  const std::vector<std::uint8_t> data = iota_bytes(4 * 2 * 3);
  const auto bytes = idx_bytes(0x08, {4, 2, 3}, data);
  for (const bool gzip : {false, true}) {
    CAPTURE(gzip);
    const std::string path = dir.file(gzip ? "images.gz" : "images");
    (gzip ? write_gzip : write_plain)(path, bytes);
    const gradsync::IdxArray array = gradsync::read_idx(path);
    CHECK(array.shape == std::vector<std::uint32_t>{4, 2, 3});
    CHECK(array.data == data);
  }
  // Gzip is recognised from the content, whatever the name says.
  write_gzip(dir.file("labels"), idx_bytes(0x08, {3}, {9, 8, 7}));
  CHECK(gradsync::read_idx(dir.file("labels")).data == std::vector<std::uint8_t>{9, 8, 7});
}

TEST_CASE("read_idx reports a missing file") {
  TempDir dir;
  const std::string path = dir.file("nope-idx1-ubyte");
  CHECK_THROWS_WITH_AS(gradsync::read_idx(path),
                       doctest::Contains((path + ": file not found").c_str()), DataError);
}

TEST_CASE("read_idx reports truncation with expected and actual sizes") {
  TempDir dir;
  auto bytes = idx_bytes(0x08, {4, 2, 3}, iota_bytes(24));
  bytes.erase(bytes.end() - 10, bytes.end());

  const std::string plain = dir.file("short");
  write_plain(plain, bytes);
  const std::string message = data_error_of([&] { gradsync::read_idx(plain); });
  CHECK(contains(message, plain));
  CHECK(contains(message, "truncated"));
  CHECK(contains(message, "expected 24"));
  CHECK(contains(message, "got 14"));

  const std::string gzipped = dir.file("short.gz");
  write_gzip(gzipped, bytes);
  const std::string gz_message = data_error_of([&] { gradsync::read_idx(gzipped); });
  CHECK(contains(gz_message, gzipped));
  CHECK(contains(gz_message, "expected 24"));
  CHECK(contains(gz_message, "got 14"));

  // A gzip file cut in the middle of its compressed stream.
  const std::string cut = dir.file("cut.gz");
  write_gzip(cut, idx_bytes(0x08, {1000}, iota_bytes(1000)));
  fs::resize_file(cut, fs::file_size(cut) / 2);
  const std::string cut_message = data_error_of([&] { gradsync::read_idx(cut); });
  CHECK(contains(cut_message, cut));
  CHECK(contains(cut_message, "truncated"));
  CHECK(contains(cut_message, "expected 1000"));

  // Not even the header survives.
  write_plain(dir.file("tiny"), {0, 0, 8});
  CHECK_THROWS_WITH_AS(gradsync::read_idx(dir.file("tiny")),
                       doctest::Contains("truncated: expected a 4-byte magic number, got 3"),
                       DataError);
}

TEST_CASE("read_idx rejects a wrong magic and unsupported types") {
  TempDir dir;
  const std::string path = dir.file("bad-magic");
  write_plain(path, {0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0});
  const std::string message = data_error_of([&] { gradsync::read_idx(path); });
  CHECK(contains(message, path));
  CHECK(contains(message, "wrong magic 0x12345678"));
  CHECK(contains(message, "expected 0x0000"));

  const std::string floats = dir.file("floats");
  write_plain(floats, idx_bytes(0x0D, {1}, {0, 0, 0, 0}));
  CHECK_THROWS_WITH_AS(gradsync::read_idx(floats),
                       doctest::Contains("unsupported IDX data type 0x0D (float)"), DataError);
}

TEST_CASE("read_idx rejects a shape whose size would wrap around 64 bits") {
  // 2^24 x 2^16 x 2^24 = 2^64 elements: 0 after wrapping, which a product checked only after
  // each multiply let through as a 16-byte file of "no" data.
  TempDir dir;
  write_plain(dir.file("huge"), idx_bytes(0x08, {1u << 24, 1u << 16, 1u << 24}, {}));
  CHECK_THROWS_WITH_AS(gradsync::read_idx(dir.file("huge")),
                       doctest::Contains("implausible shape 16777216x65536x16777216"), DataError);
}

TEST_CASE("read_idx rejects data beyond what the header announces") {
  TempDir dir;
  write_plain(dir.file("long"), idx_bytes(0x08, {2}, {1, 2, 3}));
  CHECK_THROWS_WITH_AS(gradsync::read_idx(dir.file("long")), doctest::Contains("has data after"),
                       DataError);
}

TEST_CASE("load_mnist_dir standardises with training statistics") {
  TempDir dir;
  write_mnist_dir(dir, 4, 2, /*gzip_train=*/true);
  const gradsync::TrainTest data = gradsync::load_mnist_dir(dir.path().string() + "/");
  const std::string dirname = dir.path().filename().string();
  CHECK(data.train.name == dirname + "/train");
  CHECK(data.test.name == dirname + "/test");
  CHECK(data.train.size == 4);
  CHECK(data.test.size == 2);
  CHECK(data.train.dim == 6);
  CHECK(data.test.dim == 6);
  CHECK(data.train.classes == 5);  // test labels go up to 4
  CHECK(data.test.classes == 5);
  CHECK(data.train.labels == std::vector<std::int32_t>{0, 1, 2, 0});
  CHECK(data.test.labels == std::vector<std::int32_t>{4, 4});

  const std::vector<std::uint8_t> raw = iota_bytes(24);
  double mean = 0, squares = 0;
  for (const auto b : raw) mean += b / 255.0;
  mean /= raw.size();
  for (const auto b : raw) squares += (b / 255.0 - mean) * (b / 255.0 - mean);
  const double stddev = std::sqrt(squares / raw.size());
  REQUIRE(data.train.features.size() == 24);
  for (std::size_t i = 0; i < raw.size(); ++i) {
    CHECK(data.train.features[i] == doctest::Approx((raw[i] / 255.0 - mean) / stddev));
  }
  const std::vector<std::uint8_t> test_raw = iota_bytes(12, 100);
  REQUIRE(data.test.features.size() == 12);
  for (std::size_t i = 0; i < test_raw.size(); ++i) {
    CHECK(data.test.features[i] == doctest::Approx((test_raw[i] / 255.0 - mean) / stddev));
  }
}

TEST_CASE("load_mnist_dir reports malformed directories") {
  SUBCASE("missing directory") {
    CHECK_THROWS_WITH_AS(gradsync::load_mnist_dir("/nonexistent/gradsync-mnist"),
                         "/nonexistent/gradsync-mnist: directory not found", DataError);
  }
  SUBCASE("missing file names both candidates") {
    TempDir dir;
    write_mnist_dir(dir, 4, 2, false);
    fs::remove(dir.file("t10k-labels-idx1-ubyte"));
    const std::string message = data_error_of([&] { gradsync::load_mnist_dir(dir.path()); });
    CHECK(contains(message, dir.file("t10k-labels-idx1-ubyte")));
    CHECK(contains(message, "t10k-labels-idx1-ubyte.gz"));
    CHECK(contains(message, "file not found"));
  }
  SUBCASE("images/labels count mismatch") {
    TempDir dir;
    write_mnist_dir(dir, 4, 2, false);
    write_plain(dir.file("t10k-labels-idx1-ubyte"), idx_bytes(0x08, {3}, {1, 2, 3}));
    const std::string message = data_error_of([&] { gradsync::load_mnist_dir(dir.path()); });
    CHECK(contains(message, dir.file("t10k-labels-idx1-ubyte")));
    CHECK(contains(message, "count mismatch: 3 labels"));
    CHECK(contains(message, "2 images"));
  }
  SUBCASE("wrong dimensionality") {
    TempDir dir;
    write_mnist_dir(dir, 4, 2, false);
    write_plain(dir.file("t10k-images-idx3-ubyte"), idx_bytes(0x08, {2, 6}, iota_bytes(12)));
    const std::string message = data_error_of([&] { gradsync::load_mnist_dir(dir.path()); });
    CHECK(contains(message, dir.file("t10k-images-idx3-ubyte")));
    CHECK(contains(message, "images must be 3-d"));
    CHECK(contains(message, "found 2-d"));
  }
  SUBCASE("label values") {
    TempDir dir;
    write_mnist_dir(dir, 4, 2, false);
    write_plain(dir.file("train-labels-idx1-ubyte"), idx_bytes(0x08, {4}, {0, 0, 0, 0}));
    write_plain(dir.file("t10k-labels-idx1-ubyte"), idx_bytes(0x08, {2}, {0, 0}));
    CHECK_THROWS_WITH_AS(gradsync::load_mnist_dir(dir.path()),
                         doctest::Contains("label values: every label is 0"), DataError);
  }
}

TEST_CASE("load_mnist_dir loads Fashion-MNIST when it is installed") {
  if (!fs::is_directory(gradsync::kFashionMnistDir)) {
    MESSAGE("skipped: " << gradsync::kFashionMnistDir
                        << " is missing (apt-get install dataset-fashion-mnist)");
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  const gradsync::TrainTest data = gradsync::load_mnist_dir(gradsync::kFashionMnistDir);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("Fashion-MNIST loaded in " << seconds << " s");
  CHECK(data.train.name == "fashion-mnist/train");
  CHECK(data.test.name == "fashion-mnist/test");
  CHECK(data.train.size == 60000);
  CHECK(data.test.size == 10000);
  CHECK(data.train.dim == 784);
  CHECK(data.test.dim == 784);
  CHECK(data.train.classes == 10);
  CHECK(data.train.features.size() == 60000u * 784u);
  CHECK(data.train.labels.size() == 60000u);

  std::vector<int> counts(10, 0);
  for (const std::int32_t label : data.train.labels) {
    REQUIRE(label >= 0);
    REQUIRE(label < 10);
    ++counts[label];
  }
  for (const int count : counts) CHECK(count == 6000);  // Fashion-MNIST is exactly balanced

  double sum = 0, squares = 0;
  for (const float x : data.train.features) {
    sum += x;
    squares += double{x} * x;
  }
  const double n = static_cast<double>(data.train.features.size());
  CHECK(sum / n == doctest::Approx(0.0).epsilon(1e-4).scale(1.0));
  CHECK(std::sqrt(squares / n - (sum / n) * (sum / n)) == doctest::Approx(1.0).epsilon(1e-4));
}
