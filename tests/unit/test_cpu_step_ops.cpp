// The elementwise parts of a step (model/kernels/cpu_kernels.h) on every path this CPU runs:
// each against a double-precision reference on odd shapes, with leading dimensions past the
// rows (whose padding must be left alone), and bit-identical across paths.
#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/random.h"
#include "model/kernels/cpu_kernels.h"
#include "tests/support/cpu_paths.h"

namespace {

using gradsync::testing::on_every_cpu_path;

constexpr int kOdd[] = {1, 7, 33, 257};

std::vector<float> random_values(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  gradsync::SplitMix64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs `op` (which returns the buffer it wrote) on every path; each result must equal the first
// path's bit for bit.
template <typename Op>
void check_same_bits_on_every_path(Op op) {
  std::vector<float> first;
  bool have_first = false;
  on_every_cpu_path([&] {
    std::vector<float> out = op();
    if (!have_first) {
      first = std::move(out);
      have_first = true;
    } else {
      CHECK(same_bits(out, first));
    }
  });
}

}  // namespace

TEST_CASE("cpu step ops: bias + ReLU and ReLU's derivative are exact, padding untouched") {
  for (int rows : kOdd) {
    for (int cols : kOdd) {
      CAPTURE(rows);
      CAPTURE(cols);
      const int ld = rows + 3;
      const auto bias = random_values(rows, 1);
      const auto z = random_values(std::size_t(ld) * cols, 2);
      for (bool relu : {true, false}) {
        CAPTURE(relu);
        check_same_bits_on_every_path([&] {
          std::vector<float> out = z;
          for (int j = 0; j < cols; ++j) out[std::size_t(j) * ld + rows] = NAN;
          gradsync::bias_activation(rows, cols, bias.data(), out.data(), ld, relu);
          int wrong = 0;
          for (int j = 0; j < cols; ++j) {
            for (int i = 0; i < rows; ++i) {
              const double sum = double(z[std::size_t(j) * ld + i]) + bias[i];
              const float want = static_cast<float>(relu && sum < 0 ? 0.0 : sum);
              wrong += out[std::size_t(j) * ld + i] != want;
            }
            CHECK(std::isnan(out[std::size_t(j) * ld + rows]));
          }
          CHECK(wrong == 0);
          return out;
        });
      }
      check_same_bits_on_every_path([&] {
        std::vector<float> delta = random_values(std::size_t(ld) * cols, 3);
        const std::vector<float> before = delta;
        gradsync::relu_backward(rows, cols, z.data(), ld, delta.data(), ld);
        int wrong = 0;
        for (std::size_t e = 0; e < delta.size(); ++e) {
          const bool in_matrix = static_cast<int>(e % ld) < rows;
          const float want = in_matrix && !(z[e] > 0.f) ? 0.f : before[e];
          wrong += delta[e] != want;
        }
        CHECK(wrong == 0);
        return delta;
      });
    }
  }
}

TEST_CASE("cpu step ops: the bias gradient sums each row, overwriting or accumulating") {
  for (int rows : kOdd) {
    for (int cols : kOdd) {
      CAPTURE(rows);
      CAPTURE(cols);
      const int ld = rows + 1;
      const auto delta = random_values(std::size_t(ld) * cols, 4);
      const auto start = random_values(rows, 5);
      for (bool accumulate : {false, true}) {
        CAPTURE(accumulate);
        check_same_bits_on_every_path([&] {
          std::vector<float> grad = start;
          gradsync::bias_gradient(rows, cols, delta.data(), ld, grad.data(), accumulate);
          double worst = 0;
          for (int i = 0; i < rows; ++i) {
            double sum = accumulate ? start[i] : 0.0, magnitude = std::abs(sum);
            for (int j = 0; j < cols; ++j) {
              sum += delta[std::size_t(j) * ld + i];
              magnitude += std::abs(delta[std::size_t(j) * ld + i]);
            }
            // Any summation order of cols + 1 floats stays within this bound.
            const double bound = (cols + 1) * double(FLT_EPSILON) * magnitude;
            worst = std::max(worst, std::abs(grad[i] - sum) / std::max(bound, 1e-30));
          }
          CHECK(worst < 1.0);
          return grad;
        });
      }
    }
  }
}

TEST_CASE("cpu step ops: softmax cross-entropy's loss, accuracy and gradient") {
  for (int classes : {1, 2, 7, 10, 33}) {
    for (int cols : {1, 7, 64}) {
      CAPTURE(classes);
      CAPTURE(cols);
      const int ld = classes + 2;
      // Wide logits, so that large negative exponents (and the clamp) are exercised too.
      const auto logits = random_values(std::size_t(ld) * cols, 6, 20.0);
      std::vector<std::int32_t> labels(cols);
      for (int j = 0; j < cols; ++j) labels[j] = (j * 5 + 3) % classes;
      const float scale = 1.f / static_cast<float>(cols);
      double want_loss = 0;
      std::int64_t want_correct = 0;
      std::vector<double> want_delta(std::size_t(ld) * cols, 0.0);
      for (int j = 0; j < cols; ++j) {
        const float* z = logits.data() + std::size_t(j) * ld;
        int argmax = 0;
        for (int c = 1; c < classes; ++c) argmax = z[c] > z[argmax] ? c : argmax;
        double sum = 0;
        for (int c = 0; c < classes; ++c) sum += std::exp(double(z[c]) - z[argmax]);
        want_loss += std::log(sum) - (double(z[labels[j]]) - z[argmax]);
        want_correct += argmax == labels[j];
        for (int c = 0; c < classes; ++c) {
          want_delta[std::size_t(j) * ld + c] =
              (std::exp(double(z[c]) - z[argmax]) / sum - (c == labels[j])) * scale;
        }
      }
      check_same_bits_on_every_path([&] {
        std::vector<float> delta(std::size_t(ld) * cols, NAN);
        const auto with_grad = gradsync::softmax_cross_entropy(
            classes, cols, logits.data(), ld, labels.data(), scale, delta.data(), ld);
        const auto without = gradsync::softmax_cross_entropy(classes, cols, logits.data(), ld,
                                                             labels.data(), scale, nullptr, 0);
        CHECK(with_grad.correct == want_correct);
        CHECK(without.correct == want_correct);
        CHECK(with_grad.loss_sum == without.loss_sum);
        CHECK(with_grad.loss_sum == doctest::Approx(want_loss).epsilon(1e-5));
        int wrong = 0;
        for (int j = 0; j < cols; ++j) {
          for (int c = 0; c < classes; ++c) {
            const double want = want_delta[std::size_t(j) * ld + c];
            const double error = std::abs(delta[std::size_t(j) * ld + c] - want);
            wrong += error > 1e-6 * scale + 1e-5 * std::abs(want);
          }
          CHECK(std::isnan(delta[std::size_t(j) * ld + classes]));
        }
        CHECK(wrong == 0);
        return delta;
      });
    }
  }
}

TEST_CASE("cpu step ops: the SGD update follows torch.optim.SGD's rule") {
  const std::size_t n = 1000003;  // odd: every vector width leaves a tail
  const auto grads = random_values(n, 7);
  const auto params = random_values(n, 8);
  const auto velocity = random_values(n, 9);
  struct Case {
    float lr, momentum, weight_decay, keep;
  };
  for (const Case c :
       {Case{0.1f, 0.9f, 1e-4f, 0.9f}, Case{0.1f, 0.9f, 0.f, 0.f}, Case{0.05f, 0.f, 1e-3f, 0.f}}) {
    CAPTURE(c.momentum);
    CAPTURE(c.keep);
    check_same_bits_on_every_path([&] {
      std::vector<float> p = params, v = velocity;
      gradsync::sgd_update(n, p.data(), grads.data(), v.data(), c.lr, c.momentum, c.weight_decay,
                           c.keep);
      int wrong = 0;
      for (std::size_t i = 0; i < n; ++i) {
        // The same operations in float, one rounding each (this file is compiled without
        // multiply-add contraction, tests/CMakeLists.txt): exactly what the rule says.
        const float d = grads[i] + c.weight_decay * params[i];
        const float vi = c.keep * velocity[i] + d;
        const float pi = params[i] - c.lr * (c.momentum == 0.f ? d : vi);
        wrong += v[i] != vi || p[i] != pi;
      }
      CHECK(wrong == 0);
      p.insert(p.end(), v.begin(), v.end());
      return p;
    });
  }
}

TEST_CASE("cpu step ops: transpose and the peak measurement on every path") {
  for (int rows : kOdd) {
    for (int cols : kOdd) {
      const auto in = random_values(std::size_t(rows) * cols, 10);
      check_same_bits_on_every_path([&] {
        std::vector<float> out(in.size());
        gradsync::transpose(rows, cols, in.data(), out.data());
        int wrong = 0;
        for (int i = 0; i < rows; ++i) {
          for (int j = 0; j < cols; ++j) {
            wrong += out[std::size_t(i) * cols + j] != in[std::size_t(j) * rows + i];
          }
        }
        CHECK(wrong == 0);
        return out;
      });
    }
  }
  on_every_cpu_path([] {
    const double peak = gradsync::measure_peak_gflops(gradsync::cpu_path(), 0.02);
    CHECK(std::isfinite(peak));
    CHECK(peak > 0.1);  // even an emulator does more
  });
}

TEST_CASE("cpu step ops: a NaN stays a NaN through bias + ReLU and the softmax") {
  on_every_cpu_path([] {
    // ReLU as max(x, 0) would turn it into 0 and hide a diverging run.
    std::vector<float> out = {1.f, NAN, -2.f, 3.f, 0.5f, -1.f, NAN, 2.f, 0.f};
    const std::vector<float> bias = {0.f, 0.f, 0.f};
    gradsync::bias_activation(3, 3, bias.data(), out.data(), 3, true);
    CHECK(std::isnan(out[1]));
    CHECK(std::isnan(out[6]));
    CHECK(out[2] == 0.f);
    // A NaN logit (not the label's, not the largest) still makes the loss NaN.
    const std::vector<float> logits = {0.5f, NAN, 2.f, 1.f};
    const std::vector<std::int32_t> labels = {0};
    std::vector<float> delta(4);
    const auto result = gradsync::softmax_cross_entropy(4, 1, logits.data(), 4, labels.data(), 1.f,
                                                        delta.data(), 4);
    CHECK(std::isnan(result.loss_sum));
  });
}
