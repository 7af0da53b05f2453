// teach dp-vs-ddp: the model's side of the table (bytes and time per step for the preset's
// link) is computed right, and runs that are neither dp nor allreduce are left out.
#include <doctest/doctest.h>

#include "teach/dp_vs_ddp.h"
#include "teach/zero_lesson.h"

namespace {

gradsync::RunOutcome outcome(const gradsync::Config& c, std::uint64_t bytes_per_step) {
  gradsync::RunOutcome out;
  out.summary.run = c.name;
  out.summary.workers = c.workers;
  out.summary.steps = 10;
  out.summary.parameters = 1'000'000;  // S = 4 MB
  out.summary.busiest_bytes = 10 * bytes_per_step;
  out.summary.mean_step = {0.01, 0.05, 0.01, 0, 0, 0};
  return out;
}

}  // namespace

TEST_CASE("teach dp-vs-ddp: measured beside the model at the preset's link rate") {
  gradsync::Config dp, ring, single;
  dp.name = "dp-4", dp.strategy = "dp", dp.workers = 4;
  ring.name = "ddp-4", ring.strategy = "allreduce", ring.workers = 4;
  single.name = "single";
  for (gradsync::Config* c : {&dp, &ring}) c->network.link_gbps = 1;  // 125 MB/s
  ring.comm.bucket_mb = 100;                                          // one bucket
  const auto rows = gradsync::teach::dp_vs_ddp_rows(
      {dp, single, ring}, {outcome(dp, 24'000'000), outcome(single, 0), outcome(ring, 12'000'000)});
  REQUIRE(rows.size() == 2);
  // dp: 2(N-1)S = 24 MB through replica 0 = 192 ms at 125 MB/s.
  CHECK(rows[0].predicted_bytes == doctest::Approx(24e6));
  CHECK(rows[0].predicted_comm_s == doctest::Approx(0.192));
  CHECK(rows[0].measured_bytes == doctest::Approx(24e6));
  CHECK(rows[0].measured_comm_s == doctest::Approx(0.06));
  // ring: 2(N-1)/N S = 6 MB each way, 48 ms; a rank moves 12 MB in and out.
  CHECK(rows[1].predicted_bytes == doctest::Approx(12e6));
  CHECK(rows[1].predicted_comm_s == doctest::Approx(0.048));
  CHECK(rows[1].overlap);
  const std::string table = gradsync::teach::render_dp_vs_ddp(rows);
  CHECK(table.find("| dp-4 | 4 | 24.0 | 24.0 | 60.0 | 192.0 | 70.0 |") != std::string::npos);
  CHECK(table.find("| ddp-4 | 4 | 12.0 | 12.0 | 60.0 (exposed) | 48.0 | 70.0 |") !=
        std::string::npos);
}

TEST_CASE("teach dp-vs-ddp: without a link cap there is no time to predict") {
  gradsync::Config dp;
  dp.name = "dp-2", dp.strategy = "dp", dp.workers = 2;
  const auto rows = gradsync::teach::dp_vs_ddp_rows({dp}, {outcome(dp, 8'000'000)});
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].predicted_comm_s == 0);
  CHECK(gradsync::teach::render_dp_vs_ddp(rows).find("| 8.0 | 8.0 | 60.0 | - |") !=
        std::string::npos);
}

TEST_CASE("teach zero: measured model state and bytes beside the model, per stage") {
  gradsync::Config ring, zero1, dp;
  ring.name = "allreduce-4", ring.strategy = "allreduce", ring.workers = 4;
  zero1.name = "zero1-4", zero1.strategy = "zero", zero1.workers = 4, zero1.zero.stage = 1;
  dp.name = "dp-4", dp.strategy = "dp", dp.workers = 4;
  // P = 1M: an all-reduce sends 2(N-1)/N 4P = 6 MB per rank and step, received alike.
  auto a = outcome(ring, 12'000'000), z = outcome(zero1, 12'000'000);
  a.summary.peak_model_state_bytes = 12'000'000;
  z.summary.peak_model_state_bytes = 11'000'000;
  const auto rows = gradsync::teach::zero_rows({ring, dp, zero1}, {a, outcome(dp, 0), z});
  REQUIRE(rows.size() == 2);  // dp left out
  CHECK(rows[0].stage == 0);
  CHECK(rows[0].gradsync_mb == doctest::Approx(12.0));
  CHECK(rows[1].stage == 1);
  // As built: 4P + 4P/N parameters, as much of gradients, 4P/N momentum: 11 MB; the paper's
  // stage 1 keeps 4P + 4P + 4P/N = 9 MB.
  CHECK(rows[1].gradsync_mb == doctest::Approx(11.0));
  CHECK(rows[1].paper_mb == doctest::Approx(9.0));
  CHECK(rows[1].measured_mb == doctest::Approx(11.0));
  CHECK(rows[1].sent_mb == doctest::Approx(6.0));
  CHECK(rows[1].model_sent_mb == doctest::Approx(6.0));
  const std::string table = gradsync::teach::render_zero(rows);
  CHECK(table.find("| zero1-4 | 1 | 4 | 11.00 | 11.00 | 9.00 | 6.00 | 6.00 | 70.00 |") !=
        std::string::npos);
}
