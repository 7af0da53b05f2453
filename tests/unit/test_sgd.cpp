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

TEST_CASE("sgd: cosine schedule gives torch's CosineAnnealingLR rates step by step") {
  // torch.optim.lr_scheduler.CosineAnnealingLR(SGD(lr=0.1), T_max=10): the rate of each of the
  // eleven steps 0..10, read from python3-torch 1.13.
  const double torch_rates[] = {0.1,
                                0.097552825814757688,
                                0.090450849718747381,
                                0.079389262614623674,
                                0.065450849718747386,
                                0.05,
                                0.03454915028125264,
                                0.020610737385376353,
                                0.0095491502812526351,
                                0.002447174185242324,
                                0.0};
  gradsync::SgdOptions o{0.1, 0.0, 0.0};
  o.schedule = gradsync::LrSchedule::kCosine;
  o.total_steps = 10;
  for (std::uint64_t s = 0; s <= 10; ++s) {
    CHECK(o.lr_at(s) == doctest::Approx(torch_rates[s]).epsilon(1e-12));
  }
  CHECK(o.lr_at(25) == 0.0);  // past the horizon: cosine's end
}

TEST_CASE("sgd: warm-up rises linearly to lr, then the schedule runs over what is left") {
  gradsync::SgdOptions o{0.4, 0.0, 0.0};
  o.warmup_steps = 4;
  CHECK(o.lr_at(0) == doctest::Approx(0.1));
  CHECK(o.lr_at(3) == doctest::Approx(0.4));
  CHECK(o.lr_at(100) == doctest::Approx(0.4));  // constant after warm-up
  o.schedule = gradsync::LrSchedule::kCosine;
  o.total_steps = 14;  // ten cosine steps after four of warm-up
  CHECK(o.lr_at(4) == doctest::Approx(0.4));
  CHECK(o.lr_at(9) == doctest::Approx(0.2));  // half way: half the rate
  CHECK(o.lr_at(14) == doctest::Approx(0.0));
}

TEST_CASE("sgd: each step applies its own step's rate, also after load_state (resume)") {
  gradsync::SgdOptions o{0.1, 0.0, 0.0};
  o.schedule = gradsync::LrSchedule::kCosine;
  o.total_steps = 10;
  const std::vector<float> g = {1.f};
  gradsync::Sgd sgd(1, o);
  std::vector<float> p = {0.f};
  double expected = 0;
  for (std::uint64_t s = 0; s < 4; ++s) {
    sgd.step(p, g);
    expected -= o.lr_at(s);
  }
  CHECK(p[0] == doctest::Approx(expected).epsilon(1e-6));
  // A resumed optimizer at step 4 applies step 4's rate, not step 0's.
  gradsync::Sgd resumed(1, o);
  const std::vector<float> zero = {0.f};
  resumed.load_state(zero, 4);
  std::vector<float> q = {0.f};
  resumed.step(q, g);
  CHECK(q[0] == doctest::Approx(-o.lr_at(4)).epsilon(1e-6));
}
