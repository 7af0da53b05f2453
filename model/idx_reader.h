// Reads MNIST-format IDX files (optionally gzip-compressed), as shipped by Debian's
// dataset-fashion-mnist in /usr/share/datasets/fashion-mnist.
//
// IDX: big-endian magic (0x00 0x00 type ndims), ndims big-endian uint32 sizes, then the data.
// Only unsigned-byte data (type 0x08) is accepted: that is what every MNIST-format set uses.
// Every failure throws gradsync::DataError naming the file and what is wrong (missing, wrong
// magic, truncated, size mismatch between images and labels).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/dataset.h"

namespace gradsync {

struct IdxArray {
  std::vector<std::uint32_t> shape;  // e.g. {60000, 28, 28} or {60000}
  std::vector<std::uint8_t> data;    // product(shape) bytes
};

// Reads one IDX file; gzip is detected from the content, not the name.
IdxArray read_idx(const std::string& path);

// Reads an MNIST-format directory: train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz],
// t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]. Pixels become floats standardised
// with the training set's mean and standard deviation (the same transform on both splits).
// classes = max label + 1 over both splits.
TrainTest load_mnist_dir(const std::string& dir);

// Where Debian's dataset-fashion-mnist package installs the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

}  // namespace gradsync
