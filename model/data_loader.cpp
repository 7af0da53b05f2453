#include "model/data_loader.h"

#include "common/error.h"
#include "model/idx_reader.h"
#include "model/synthetic_data.h"

namespace gradsync {

TrainTest load_data(const DataConfig& data, std::uint64_t seed) {
  if (data.kind == "fashion-mnist") {
    return load_mnist_dir(data.dir.empty() ? kFashionMnistDir : data.dir);
  }
  if (data.kind == "idx") return load_mnist_dir(data.dir);
  if (data.kind == "synthetic") {
    SyntheticDataOptions options;
    options.train_samples = data.train_samples;
    options.test_samples = data.test_samples;
    options.dim = data.dim;
    options.classes = data.classes;
    options.seed = seed;
    return make_synthetic_data(options);
  }
  throw ConfigError("data", "data.kind",
                    "unknown kind '" + data.kind + "' (valid: fashion-mnist, idx, synthetic)");
}

}  // namespace gradsync
