#include <doctest/doctest.h>

#include "model/optimizer/sgd.h"

TEST_CASE("sgd: plain step is p -= lr * g") {
  gradsync::Sgd sgd(2, {0.5, 0.0, 0.0});
  std::vector<float> p = {1.f, -2.f};
  const std::vector<float> g = {0.2f, 0.4f};
  sgd.step(p, g);
  CHECK(p[0] == doctest::Approx(0.9));
  CHECK(p[1] == doctest::Approx(-2.2));
}

TEST_CASE("sgd: momentum and weight decay follow torch.optim.SGD") {
  // torch: d = g + wd*p; v = d on the first step, then v = mu*v + d; p -= lr*v.
  const double lr = 0.1, mu = 0.9, wd = 0.01;
  gradsync::Sgd sgd(1, {lr, mu, wd});
  std::vector<float> p = {1.f};
  double ref_p = 1.0, ref_v = 0.0;
  const float grads[] = {0.5f, -0.25f, 0.125f, 1.0f};
  for (int t = 0; t < 4; ++t) {
    const float g[] = {grads[t]};
    sgd.step(p, g);
    const double d = grads[t] + wd * ref_p;
    ref_v = t == 0 ? d : mu * ref_v + d;
    ref_p -= lr * ref_v;
    CHECK(p[0] == doctest::Approx(ref_p).epsilon(1e-6));
  }
  CHECK(sgd.steps_taken() == 4);
}

TEST_CASE("sgd: a range of the wrong size is refused") {
  gradsync::Sgd sgd(3, {});
  std::vector<float> p(2), g(2);
  CHECK_THROWS(sgd.step(p, g));
}
