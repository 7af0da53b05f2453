#include "model/synthetic_data.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/random.h"

namespace gradsync {
namespace {

constexpr int kTeacherHidden = 64;
// The label balancing below is fitted on its own sample, so the teacher (and so every label)
// depends only on (seed, dim, classes), never on how many samples are asked for.
constexpr int kCalibrationSamples = 8192;
constexpr int kBalanceIterations = 200;
constexpr double kBalanceRate = 0.05;

class Teacher {
 public:
  Teacher(int dim, int classes, SplitMix64& rng)
      : dim_(dim),
        classes_(classes),
        w1_(std::size_t{kTeacherHidden} * dim),
        w2_(std::size_t(classes) * kTeacherHidden),
        bias_(classes, 0.0) {
    const double scale1 = 1.0 / std::sqrt(static_cast<double>(dim));
    for (double& w : w1_) w = rng.normal() * scale1;
    const double scale2 = 1.0 / std::sqrt(static_cast<double>(kTeacherHidden));
    for (double& w : w2_) w = rng.normal() * scale2;
  }

  // Logits without the balancing bias.
  void logits(const float* x, double* out) const {
    double hidden[kTeacherHidden];
    for (int h = 0; h < kTeacherHidden; ++h) {
      const double* row = &w1_[std::size_t(h) * dim_];
      double sum = 0;
      for (int i = 0; i < dim_; ++i) sum += row[i] * x[i];
      hidden[h] = std::tanh(sum);
    }
    for (int c = 0; c < classes_; ++c) {
      const double* row = &w2_[std::size_t(c) * kTeacherHidden];
      double sum = 0;
      for (int h = 0; h < kTeacherHidden; ++h) sum += row[h] * hidden[h];
      out[c] = sum;
    }
  }

  // `scratch` holds `classes` doubles; passed in so labelling allocates nothing per sample.
  int label(const float* x, double* scratch) const {
    logits(x, scratch);
    return argmax_with_bias(scratch);
  }

  // A random teacher favours the classes whose output rows happen to be larger, sometimes
  // leaving a class almost empty. Per-class biases fitted on a calibration sample (first
  // centring each logit, then nudging towards equal shares) make every class about equally
  // likely while keeping the decision boundaries' shapes.
  void balance(SplitMix64& rng) {
    const std::size_t n = kCalibrationSamples;
    std::vector<float> x(dim_);
    std::vector<double> z(n * classes_);
    for (std::size_t s = 0; s < n; ++s) {
      for (float& v : x) v = static_cast<float>(rng.normal());
      logits(x.data(), &z[s * classes_]);
    }
    for (int c = 0; c < classes_; ++c) {
      double sum = 0;
      for (std::size_t s = 0; s < n; ++s) sum += z[s * classes_ + c];
      bias_[c] = -sum / static_cast<double>(n);
    }
    // Steps are a fraction of the logits' spread and clipped: a bias jump larger than that
    // spread hands one class's whole share to another and the fit oscillates.
    double squares = 0;
    for (std::size_t k = 0; k < z.size(); ++k) {
      const double centred = z[k] + bias_[k % classes_];
      squares += centred * centred;
    }
    const double step = kBalanceRate * std::sqrt(squares / static_cast<double>(z.size()));
    const double target = static_cast<double>(n) / classes_;
    std::vector<double> counts(classes_);
    for (int it = 0; it < kBalanceIterations; ++it) {
      std::fill(counts.begin(), counts.end(), 0.0);
      for (std::size_t s = 0; s < n; ++s) ++counts[argmax_with_bias(&z[s * classes_])];
      for (int c = 0; c < classes_; ++c) {
        const double log_ratio = std::log((target + 0.5) / (counts[c] + 0.5));
        bias_[c] += step * std::clamp(log_ratio, -1.0, 1.0);
      }
    }
  }

 private:
  int argmax_with_bias(const double* z) const {
    int best = 0;
    for (int c = 1; c < classes_; ++c) {
      if (z[c] + bias_[c] > z[best] + bias_[best]) best = c;
    }
    return best;
  }

  int dim_;
  int classes_;
  std::vector<double> w1_;  // kTeacherHidden x dim, row-major
  std::vector<double> w2_;  // classes x kTeacherHidden, row-major
  std::vector<double> bias_;
};

Dataset generate(const Teacher& teacher, const SyntheticDataOptions& options, std::int64_t samples,
                 const std::string& name, SplitMix64& rng) {
  Dataset dataset;
  dataset.name = name;
  dataset.size = samples;
  dataset.dim = options.dim;
  dataset.classes = options.classes;
  dataset.features.resize(static_cast<std::size_t>(samples) * options.dim);
  dataset.labels.resize(static_cast<std::size_t>(samples));
  std::vector<double> scratch(options.classes);
  for (std::int64_t s = 0; s < samples; ++s) {
    float* x = dataset.features.data() + s * options.dim;
    for (int i = 0; i < options.dim; ++i) x[i] = static_cast<float>(rng.normal());
    dataset.labels[s] = teacher.label(x, scratch.data());
  }
  return dataset;
}

}  // namespace

TrainTest make_synthetic_data(const SyntheticDataOptions& options) {
  if (options.train_samples < 1 || options.test_samples < 0) {
    throw Error("synthetic data: need train_samples >= 1 and test_samples >= 0, got " +
                std::to_string(options.train_samples) + " and " +
                std::to_string(options.test_samples));
  }
  if (options.dim < 1 || options.classes < 2) {
    throw Error("synthetic data: need dim >= 1 and classes >= 2, got dim " +
                std::to_string(options.dim) + " and classes " + std::to_string(options.classes));
  }

  // Four independent streams from one seed (common/random.h): teacher weights, calibration,
  // train and test, so asking for more train samples never changes the test set.
  SplitMix64 teacher_rng(mix_seed(options.seed, 1));
  SplitMix64 calibration_rng(mix_seed(options.seed, 2));
  SplitMix64 train_rng(mix_seed(options.seed, 3));
  SplitMix64 test_rng(mix_seed(options.seed, 4));

  Teacher teacher(options.dim, options.classes, teacher_rng);
  teacher.balance(calibration_rng);
  TrainTest result;
  result.train = generate(teacher, options, options.train_samples, "synthetic/train", train_rng);
  result.test = generate(teacher, options, options.test_samples, "synthetic/test", test_rng);
  return result;
}

}  // namespace gradsync
