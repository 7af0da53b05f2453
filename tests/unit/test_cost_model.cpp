// The alpha-beta cost model against values worked out by hand (N = 4, S = 100 MB, K = 2:
// dp 6 messages and 600 MB, ps 2 and 200 MB, the ring 6 and 150 MB), calibration recovering a
// known link, and reading observations from a fabricated results folder.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "experiments/calibration_runs.h"
#include "experiments/cost_model.h"
#include "experiments/preset.h"
#include "tests/support/temp_dir.h"

namespace gradsync::cost {
namespace {

namespace fs = std::filesystem;
using gradsync::testing::TempDir;

constexpr double kS = 100e6;       // 100 MB
constexpr double kChunk = 524288;  // a ps chunk: 128Ki floats

Scenario scenario(Scheme scheme, int workers, int servers = 1, double bytes = kS, int buckets = 1) {
  return {scheme, workers, servers, bytes, buckets};
}

// Synthetic measurements: exactly what the model predicts on `link`.
Observation observe(const Scenario& s, const LinkParams& link, double noise = 1.0) {
  return {scheme_name(s.scheme) + "-" + std::to_string(s.workers), s,
          step_terms(s).seconds(link) * noise};
}

// A varied set of runs: every scheme, several N, K, B and S.
std::vector<Scenario> varied_scenarios() {
  return {scenario(Scheme::kRing, 2, 1, 4e6, 1),   scenario(Scheme::kRing, 4, 1, 4e6, 4),
          scenario(Scheme::kRing, 8, 1, 100e6, 4), scenario(Scheme::kDp, 2, 1, 1e6),
          scenario(Scheme::kDp, 4, 1, 1e6),        scenario(Scheme::kPs, 4, 2, 4e6),
          scenario(Scheme::kPs, 8, 1, 100e6),      scenario(Scheme::kRing, 16, 1, 1e5, 1)};
}

// Full double precision, as nlohmann_json writes summary.json.
std::string number(double value) {
  std::ostringstream out;
  out << std::setprecision(17) << value;
  return out.str();
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// A run folder as `gradsync run` leaves it: config.yaml from to_yaml, and a summary.json with
// the fields the calibration reads (plus a few it ignores).
void write_run(const fs::path& root, const std::string& name, const Config& config,
               long long parameters, double communicate_s, double wait_s, bool summary = true) {
  const fs::path dir = root / name;
  fs::create_directories(dir);
  write_file(dir / "config.yaml", to_yaml(config));
  if (!summary) return;
  write_file(dir / "summary.json",
             "{\n  \"run\": \"" + name + "\",\n  \"strategy\": \"" + config.strategy +
                 "\",\n  \"workers\": " + std::to_string(config.workers) +
                 ",\n  \"parameters\": " + std::to_string(parameters) +
                 ",\n  \"samples_per_s\": 1234.5,\n  \"mean_step_s\": {\"compute\": 0.1, "
                 "\"communicate\": " +
                 number(communicate_s) + ", \"wait\": " + number(wait_s) + "}\n}\n");
}

Config make_config(const std::string& strategy, int workers) {
  Config config;
  config.name = strategy + "-" + std::to_string(workers);
  config.strategy = strategy;
  config.workers = workers;
  config.data.kind = "synthetic";  // no data directory to validate on load
  return config;
}

}  // namespace

TEST_CASE("cost: hand-computed terms for N=4, S=100 MB, K=2") {
  const CostTerms dp = step_terms(scenario(Scheme::kDp, 4));
  CHECK(dp.messages == 6);  // 3 gradients in, 3 copies out
  CHECK(dp.bytes == doctest::Approx(600e6));
  const CostTerms ps = step_terms(scenario(Scheme::kPs, 4, 2));
  CHECK(ps.messages == 2);
  // A shard's link: 4 workers x 50 MB, then the last 512 KiB chunk's 4 replies drain.
  CHECK(ps.bytes == doctest::Approx(200e6 + 4 * kChunk));
  const CostTerms ring = step_terms(scenario(Scheme::kRing, 4));
  CHECK(ring.messages == 6);                    // 3 reduce-scatter + 3 all-gather rounds
  CHECK(ring.bytes == doctest::Approx(150e6));  // 2 * 3/4 * 100 MB
  // Buckets repeat the rounds, not the bytes.
  const CostTerms ring3 = step_terms(scenario(Scheme::kRing, 4, 1, kS, 3));
  CHECK(ring3.messages == 18);
  CHECK(ring3.bytes == doctest::Approx(150e6));
  // Enough shards: the worker's own link (S each way) sets the pace; its last chunk from each
  // of the 8 shards drains after.
  CHECK(step_terms(scenario(Scheme::kPs, 4, 8)).bytes == doctest::Approx(100e6 + 8 * kChunk));
  // One chunk per shard: no pipeline, the shard receives all N pushes, then sends N replies.
  const double small = 4 * kChunk;  // one chunk for each of 4 shards
  CHECK(step_terms(scenario(Scheme::kPs, 4, 4, small)).bytes == doctest::Approx(2 * small));
  CHECK(step_terms(scenario(Scheme::kPs, 8, 1, kChunk)).bytes == doctest::Approx(16 * kChunk));
}

TEST_CASE("cost: seconds = messages * alpha + bytes * beta") {
  const LinkParams link{1e-3, 1e-9};
  CHECK(step_terms(scenario(Scheme::kDp, 4)).seconds(link) == doctest::Approx(0.606));
  CHECK(step_terms(scenario(Scheme::kPs, 4, 2)).seconds(link) ==
        doctest::Approx(0.202 + 4 * kChunk * 1e-9));
  CHECK(step_terms(scenario(Scheme::kRing, 4)).seconds(link) == doctest::Approx(0.156));
  CHECK(LinkParams{0, 8e-10}.gbps() == doctest::Approx(10.0));
  CHECK(std::isinf(LinkParams{1e-6, 0}.gbps()));
}

TEST_CASE("cost: one worker costs nothing for dp and the ring, S each way (+ drain) for ps") {
  for (const Scheme scheme : {Scheme::kDp, Scheme::kRing}) {
    const CostTerms t = step_terms(scenario(scheme, 1, 1, kS, 4));
    CHECK(t.messages == 0);
    CHECK(t.bytes == 0);
    CHECK(busiest_node_bytes(scenario(scheme, 1)) == 0);
  }
  for (const int k : {1, 4}) {
    const CostTerms t = step_terms(scenario(Scheme::kPs, 1, k));
    CHECK(t.messages == 2);
    CHECK(t.bytes == doctest::Approx(kS + k * kChunk));
    CHECK(busiest_node_bytes(scenario(Scheme::kPs, 1, k)) == doctest::Approx(2 * kS));
  }
}

TEST_CASE("cost: bytes through the busiest node") {
  CHECK(busiest_node_bytes(scenario(Scheme::kDp, 4)) == doctest::Approx(600e6));
  // A shard moves 2NS/K = 400 MB, more than a worker's 2S = 200 MB...
  CHECK(busiest_node_bytes(scenario(Scheme::kPs, 4, 2)) == doctest::Approx(400e6));
  // ...until there are more shards than workers: then the worker's 2S.
  CHECK(busiest_node_bytes(scenario(Scheme::kPs, 4, 8)) == doctest::Approx(200e6));
  CHECK(busiest_node_bytes(scenario(Scheme::kRing, 4)) == doctest::Approx(300e6));
  CHECK(busiest_node_bytes(scenario(Scheme::kRing, 4, 1, kS, 5)) == doctest::Approx(300e6));
}

TEST_CASE("cost: invalid scenarios and scheme names are refused") {
  CHECK_THROWS_AS(step_terms(scenario(Scheme::kDp, 0)), ConfigError);
  CHECK_THROWS_AS(step_terms(scenario(Scheme::kPs, 4, 0)), ConfigError);
  CHECK_THROWS_AS(step_terms(scenario(Scheme::kRing, 4, 1, kS, 0)), ConfigError);
  CHECK_THROWS_AS(step_terms(scenario(Scheme::kRing, 4, 1, -1)), ConfigError);
  CHECK_THROWS_AS(step_terms(scenario(Scheme::kRing, 4, 1, std::nan(""))), ConfigError);
  CHECK_THROWS_AS(busiest_node_bytes(scenario(Scheme::kDp, -3)), ConfigError);
  CHECK(step_terms(scenario(Scheme::kRing, 4, 1, 0)).bytes == 0);

  CHECK(parse_scheme("dp") == Scheme::kDp);
  CHECK(parse_scheme("ps") == Scheme::kPs);
  CHECK(parse_scheme("ring") == Scheme::kRing);
  CHECK(parse_scheme("allreduce") == Scheme::kRing);
  CHECK(scheme_name(Scheme::kRing) == "ring");
  CHECK_THROWS_WITH_AS(parse_scheme("nccl"), doctest::Contains("'nccl'"), ConfigError);
}

TEST_CASE("cost: the fewest ps shards that beat the ring") {
  const LinkParams bandwidth_only{0, 1e-9};
  // N=4: the ring moves 150 MB; ps with K shards max(100, 400/K) MB: K=3 gives 133 MB.
  CHECK(ps_servers_to_beat_ring(4, kS, bandwidth_only, 1024) == 3);
  CHECK(ps_servers_to_beat_ring(4, kS, bandwidth_only, 2) == 0);  // not within the limit
  // N=2: the ring moves S, and ps never less than S: a tie is not a win.
  CHECK(ps_servers_to_beat_ring(2, kS, bandwidth_only, 1024) == 0);
  // N=8: ring 175 MB; ps 800/K MB < 175 needs K >= 5.
  CHECK(ps_servers_to_beat_ring(8, kS, bandwidth_only, 1024) == 5);
  // N=1: the ring costs nothing, ps still moves S.
  CHECK(ps_servers_to_beat_ring(1, kS, bandwidth_only, 1024) == 0);
  // High latency, many workers, a small model: the ring's 2(N-1) = 126 latencies cost more
  // than one shard's 64 MB, so even K=1 wins.
  const LinkParams slow_messages{1e-3, 1e-9};
  CHECK(ps_servers_to_beat_ring(64, 1e6, slow_messages, 1024) == 1);
  // The same link with a 100 MB model: bandwidth dominates again. Ring: 126 latencies + 2(63/64)
  // x 100 MB = 0.126 + 0.196875 s. ps: 2 latencies + a shard's 64 x 100 MB / K + the drain's 64
  // chunks of 512 KiB = 0.0355544 + 6.4/K s, below the ring from K = 23 (6.4/22 = 0.2909 s is
  // not, 6.4/23 = 0.2783 s is): far more shards than the K = 1 above.
  CHECK(ps_servers_to_beat_ring(64, kS, slow_messages, 1024) == 23);
}

TEST_CASE("cost: calibrate recovers the link that generated the observations") {
  const LinkParams truth{30e-6, 1.0 / 1.25e9};  // 30 us, 10 Gbit/s
  std::vector<Observation> observations;
  for (const Scenario& s : varied_scenarios()) observations.push_back(observe(s, truth));
  const LinkParams fit = calibrate(observations);
  CHECK(fit.alpha_s == doctest::Approx(truth.alpha_s).epsilon(1e-9));
  CHECK(fit.beta_s_per_byte == doctest::Approx(truth.beta_s_per_byte).epsilon(1e-9));
  CHECK(fit.gbps() == doctest::Approx(10.0).epsilon(1e-9));

  // Two runs are enough when they separate the terms.
  const LinkParams two =
      calibrate(std::vector<Observation>(observations.begin(), observations.begin() + 2));
  CHECK(two.alpha_s == doctest::Approx(truth.alpha_s).epsilon(1e-9));
  CHECK(two.beta_s_per_byte == doctest::Approx(truth.beta_s_per_byte).epsilon(1e-9));

  // Runs without a measurement are ignored, not fitted as zero.
  observations.push_back({"empty", scenario(Scheme::kDp, 8), 0});
  const LinkParams with_empty = calibrate(observations);
  CHECK(with_empty.alpha_s == doctest::Approx(truth.alpha_s).epsilon(1e-9));
}

TEST_CASE("cost: calibrate with +-5% noise stays close") {
  const LinkParams truth{50e-6, 1.0 / 1e9};
  const double noise[] = {1.05, 0.95, 1.03, 0.97, 1.0, 1.04, 0.96, 1.02};
  std::vector<Observation> observations;
  const auto scenarios = varied_scenarios();
  for (std::size_t i = 0; i < scenarios.size(); ++i) {
    observations.push_back(observe(scenarios[i], truth, noise[i]));
  }
  const LinkParams fit = calibrate(observations);
  CHECK(fit.alpha_s == doctest::Approx(truth.alpha_s).epsilon(0.15));
  CHECK(fit.beta_s_per_byte == doctest::Approx(truth.beta_s_per_byte).epsilon(0.15));
  // Every prediction within the noise band, give or take.
  for (const Observation& o : observations) {
    const double predicted = step_terms(o.scenario).seconds(fit);
    CHECK(std::abs(predicted / o.measured_s - 1) < 0.1);
  }
}

TEST_CASE("cost: calibrate keeps alpha and beta non-negative") {
  // Two runs moving the same bytes, the one with 1000x the messages measured as faster: the
  // unconstrained fit wants a negative alpha. The constrained one sets alpha = 0 and fits beta
  // alone: minimise (y1 b - 1)^2 + (y2 b - 1)^2, b = (y1 + y2) / (y1^2 + y2^2).
  const std::vector<Observation> observations = {
      {"few", {Scheme::kPs, 1, 1, 1e8, 1}, 0.10},                      // 2 messages
      {"many", {Scheme::kRing, 1001, 1, 1e8 * 1001 / 2000, 1}, 0.09},  // 2000 messages, 1e8 B
  };
  const double b1 = step_terms(observations[1].scenario).bytes;
  REQUIRE(b1 == doctest::Approx(1e8));
  const LinkParams fit = calibrate(observations);
  const double y1 = 1e8 / 0.10, y2 = b1 / 0.09;
  CHECK(fit.alpha_s == 0);
  CHECK(fit.beta_s_per_byte == doctest::Approx((y1 + y2) / (y1 * y1 + y2 * y2)));
}

TEST_CASE("cost: calibrate refuses what it cannot fit") {
  const LinkParams truth{30e-6, 1e-9};
  const Observation one = observe(scenario(Scheme::kRing, 4), truth);
  CHECK_THROWS_WITH_AS(calibrate(std::vector<Observation>{one}), doctest::Contains("at least 2"),
                       ConfigError);
  CHECK_THROWS_AS(calibrate(std::vector<Observation>{}), ConfigError);
  // Two runs, but only one with a measured time.
  CHECK_THROWS_AS(calibrate(std::vector<Observation>{one, {"zero", scenario(Scheme::kDp, 4), 0}}),
                  ConfigError);
  // dp with the same S at any N: messages and bytes are both 2(N-1)*(1, S), proportional, so
  // latency and bandwidth cannot be told apart.
  std::vector<Observation> dp_only;
  for (const int n : {2, 4, 8, 16}) dp_only.push_back(observe(scenario(Scheme::kDp, n), truth));
  CHECK_THROWS_WITH_AS(calibrate(dp_only), doctest::Contains("cannot separate"), ConfigError);
  // The same run twice is no better.
  CHECK_THROWS_AS(calibrate(std::vector<Observation>{one, one}), ConfigError);
}

TEST_CASE("cost: read_observations turns a results folder into observations") {
  TempDir tmp;
  Config dp = make_config("dp", 4);
  Config ps = make_config("ps", 4);
  ps.ps.servers = 2;
  Config ring = make_config("allreduce", 4);
  ring.comm.bucket_mb = 1;  // 4,000,000 bytes in 1 MiB buckets: B = 4
  Config ring8 = make_config("allreduce", 8);
  Config single = make_config("single", 1);
  Config async = make_config("ps", 4);
  async.ps.mode = "async";
  write_run(tmp.path(), "b-dp-4", dp, 1'000'000, 0.020, 0.005);
  write_run(tmp.path(), "c-ps-4", ps, 1'000'000, 0.010, 0.0);
  write_run(tmp.path(), "a-allreduce-4", ring, 1'000'000, 0.004, 0.001);
  write_run(tmp.path(), "d-allreduce-8", ring8, 1'000'000, 0.006, 0.0);
  write_run(tmp.path(), "e-single", single, 0, 0, 0, /*summary=*/false);
  write_run(tmp.path(), "f-ps-async", async, 0, 0, 0, /*summary=*/false);
  write_run(tmp.path(), "g-dp-n16", make_config("dp", 16), 1'000'000, 0.2, 0.0);
  write_run(tmp.path(), "g-dp-n2", make_config("dp", 2), 1'000'000, 0.02, 0.0);
  fs::create_directories(tmp.path() / "plots");  // not a run folder: ignored
  write_file(tmp.path() / "comparison.md", "| run |\n");

  std::vector<std::string> skipped;
  const std::vector<Observation> obs = read_observations(tmp.path().string(), &skipped);
  REQUIRE(obs.size() == 6);
  // In folder-name order.
  CHECK(obs[0].label == "a-allreduce-4");
  CHECK(obs[0].scenario.scheme == Scheme::kRing);
  CHECK(obs[0].scenario.workers == 4);
  CHECK(obs[0].scenario.model_bytes == 4e6);
  CHECK(obs[0].scenario.buckets == 4);
  CHECK(obs[0].measured_s == doctest::Approx(0.005));
  CHECK(obs[1].label == "b-dp-4");
  CHECK(obs[1].scenario.scheme == Scheme::kDp);
  CHECK(obs[1].measured_s == doctest::Approx(0.025));
  CHECK(obs[2].label == "c-ps-4");
  CHECK(obs[2].scenario.scheme == Scheme::kPs);
  CHECK(obs[2].scenario.servers == 2);
  CHECK(obs[3].label == "d-allreduce-8");
  CHECK(obs[3].scenario.buckets == 1);  // 4 MB in the default 25 MiB bucket
  CHECK(obs[3].scenario.workers == 8);
  // Numbers in names compare by value, as a sweep's <run>-n<N> folders need.
  CHECK(obs[4].label == "g-dp-n2");
  CHECK(obs[5].label == "g-dp-n16");
  CHECK(obs[5].scenario.workers == 16);
  REQUIRE(skipped.size() == 2);
  CHECK(skipped[0].find("e-single") == 0);
  CHECK(skipped[1].find("f-ps-async") == 0);
  CHECK(skipped[1].find("async") != std::string::npos);

  // A run folder given directly is one observation; a null `skipped` is fine.
  const auto one = read_observations((tmp.path() / "c-ps-4").string(), nullptr);
  REQUIRE(one.size() == 1);
  CHECK(one[0].label == "c-ps-4");
  CHECK(one[0].measured_s == doctest::Approx(0.010));
}

TEST_CASE("cost: read_observations takes a ring's bucket count from its summary") {
  // Buckets close at layer boundaries, so a run can use fewer than size / bucket_mb.
  TempDir tmp;
  Config ring = make_config("allreduce", 4);
  ring.comm.bucket_mb = 1;  // 4 MB in 1 MiB: the size alone says B = 4
  write_run(tmp.path(), "ring", ring, 1'000'000, 0.004, 0.0);
  write_file(tmp.path() / "ring" / "summary.json",
             "{\"parameters\": 1000000, \"collectives_per_step\": 2, \"mean_step_s\": "
             "{\"compute\": 0.1, \"communicate\": 0.004, \"wait\": 0}}\n");
  const auto obs = read_observations(tmp.path().string(), nullptr);
  REQUIRE(obs.size() == 1);
  CHECK(obs[0].scenario.buckets == 2);
}

TEST_CASE("cost: read_observations reads runs whose data set is not on this machine") {
  // Results copied from a cluster name its data folder; calibrating needs only the timings.
  TempDir tmp;
  Config dp = make_config("dp", 2);
  dp.data.kind = "idx";
  dp.data.dir = "/mnt/cluster/no-such-fashion-mnist";
  write_run(tmp.path(), "dp-2", dp, 1'000'000, 0.020, 0.0);
  const auto obs = read_observations(tmp.path().string(), nullptr);
  REQUIRE(obs.size() == 1);
  CHECK(obs[0].measured_s == doctest::Approx(0.020));
}

TEST_CASE("cost: read_observations then calibrate recovers the link of the runs") {
  TempDir tmp;
  const LinkParams truth{100e-6, 1.0 / 0.5e9};  // 100 us, 4 Gbit/s
  const long long parameters = 2'000'000;       // 8 MB
  int index = 0;
  for (const auto& [strategy, workers] : std::vector<std::pair<std::string, int>>{
           {"dp", 2}, {"dp", 4}, {"ps", 4}, {"allreduce", 2}, {"allreduce", 8}}) {
    Config config = make_config(strategy, workers);
    config.ps.servers = 2;
    const Scheme scheme = parse_scheme(strategy);
    const double seconds =
        step_terms({scheme, workers, scheme == Scheme::kPs ? 2 : 1, parameters * 4.0, 1})
            .seconds(truth);
    write_run(tmp.path(), "run" + std::to_string(index++), config, parameters, seconds * 0.75,
              seconds * 0.25);
  }
  const LinkParams fit = calibrate(read_observations(tmp.path().string(), nullptr));
  CHECK(fit.alpha_s == doctest::Approx(truth.alpha_s).epsilon(1e-9));
  CHECK(fit.gbps() == doctest::Approx(4.0).epsilon(1e-9));
}

TEST_CASE("cost: read_observations names the file it cannot use") {
  TempDir tmp;
  CHECK_THROWS_WITH_AS(read_observations((tmp.path() / "nope").string(), nullptr),
                       doctest::Contains("nope"), Error);
  CHECK_THROWS_WITH_AS(read_observations(tmp.path().string(), nullptr),
                       doctest::Contains("no run folders"), Error);

  write_run(tmp.path(), "dp-2", make_config("dp", 2), 0, 0, 0, /*summary=*/false);
  CHECK_THROWS_WITH_AS(read_observations(tmp.path().string(), nullptr),
                       doctest::Contains("dp-2/summary.json"), DataError);

  write_file(tmp.path() / "dp-2" / "summary.json", "{\"parameters\": 10,");
  CHECK_THROWS_WITH_AS(read_observations(tmp.path().string(), nullptr),
                       doctest::Contains("not valid JSON"), DataError);

  write_file(tmp.path() / "dp-2" / "summary.json", "{\"parameters\": 10}");
  CHECK_THROWS_WITH_AS(read_observations(tmp.path().string(), nullptr),
                       doctest::Contains("mean_step_s.communicate"), DataError);

  write_file(tmp.path() / "dp-2" / "config.yaml", "strategy: dp\nworkers: [1\n");
  CHECK_THROWS_WITH_AS(read_observations(tmp.path().string(), nullptr),
                       doctest::Contains("dp-2/config.yaml"), ConfigError);
}

TEST_CASE("cost: flat ring against hierarchical, bytes within and between hosts") {
  const double s = 100;
  // 2 hosts x 2 ranks: the ring's 4 links carry 1.5 S each, 2 of them cross hosts.
  const HostBytes flat = flat_ring_host_bytes(2, 2, s);
  CHECK(flat.inter_host == doctest::Approx(300));
  CHECK(flat.intra_host == doctest::Approx(300));
  // The leaders' ring of 2 sends S each way; within a host an all-reduce of 2 (2 S) and a
  // broadcast to one rank (S).
  const HostBytes hier = hierarchical_host_bytes(2, 2, s);
  CHECK(hier.inter_host == doctest::Approx(200));
  CHECK(hier.intra_host == doctest::Approx(600));
  // One host: nothing crosses; a rank per host: the hierarchy is the ring.
  CHECK(flat_ring_host_bytes(1, 4, s).inter_host == 0);
  CHECK(hierarchical_host_bytes(1, 4, s).inter_host == 0);
  CHECK(hierarchical_host_bytes(4, 1, s).inter_host ==
        doctest::Approx(flat_ring_host_bytes(4, 1, s).inter_host));
  CHECK(hierarchical_host_bytes(4, 1, s).intra_host == 0);
  // Many ranks per host: the ring's inter-host bytes approach 2 H S, the hierarchy's stay.
  CHECK(flat_ring_host_bytes(2, 64, s).inter_host > 390);
  CHECK(hierarchical_host_bytes(2, 64, s).inter_host == doctest::Approx(200));
  CHECK_THROWS_AS(flat_ring_host_bytes(0, 2, s), ConfigError);
  CHECK_THROWS_AS(hierarchical_host_bytes(2, 0, s), ConfigError);
}

TEST_CASE("cost: compression scales the ring's bytes by its wire fraction") {
  CHECK(ring_wire_fraction({"none"}, 4) == 1);
  CHECK(ring_wire_fraction({"fp16"}, 4) == 0.5);
  CHECK(ring_wire_fraction({"bf16"}, 8) == 0.5);
  // 784-256-256-10 at rank 4: (784+256)4 + (256+256)4 + (256+10)4 + 522 biases floats sent.
  const double params = 784.0 * 256 + 256 * 256 + 256 * 10 + 522;
  const double sent = (784 + 256) * 4 + (256 + 256) * 4 + (256 + 10) * 4 + 522;
  CHECK(ring_wire_fraction({"powersgd", 0, sent, params}, 4) == doctest::Approx(sent / params));
  // top-k's allgather: N ratio of the ring's bytes, growing with N.
  CHECK(ring_wire_fraction({"topk", 0.01}, 4) == doctest::Approx(0.04));
  CHECK(ring_wire_fraction({"topk", 0.01}, 64) == doctest::Approx(0.64));
  const Scenario half{Scheme::kRing, 4, 1, kS, 1, 0.5};
  CHECK(step_terms(half).bytes == doctest::Approx(0.5 * 1.5 * kS));
  CHECK(busiest_node_bytes(half) == doctest::Approx(0.5 * 2 * 1.5 * kS));
  CHECK_THROWS_AS(ring_wire_fraction({"zip"}, 4), ConfigError);
  CHECK_THROWS_AS(ring_wire_fraction({"topk", 0}, 4), ConfigError);
}

TEST_CASE("cost: ZeRO's model state per rank and bytes per step") {
  const double p = 1000;
  CHECK(zero_paper_bytes(0, 4, p).total() == 12000);
  CHECK(zero_paper_bytes(1, 4, p).optimizer == 1000);
  CHECK(zero_paper_bytes(2, 4, p).total() == doctest::Approx(4000 + 1000 + 1000));
  CHECK(zero_paper_bytes(3, 4, p).total() == doctest::Approx(3000));
  // As built: the model's full buffers stay, the shards beside them.
  CHECK(zero_gradsync_bytes(1, 4, p).total() == doctest::Approx(4000 + 1000 + 4000 + 1000 + 1000));
  CHECK(zero_gradsync_bytes(2, 2, p).optimizer == doctest::Approx(2000));
  CHECK(zero_step_bytes(1, 4, p) == doctest::Approx(6000));  // one all-reduce's 2(N-1)/N 4P
  CHECK(zero_step_bytes(3, 4, p) == doctest::Approx(9000));  // 1.5x
  CHECK(zero_step_bytes(2, 1, p) == 0);
  CHECK_THROWS_AS(zero_paper_bytes(4, 2, p), ConfigError);
  // Stages 2 and 3 on the layer storage, four layers of 250: two layer gradients beside the
  // full parameters; two gathered layers and two layer gradients beside the shards.
  const std::vector<double> layers(4, 250);
  CHECK(zero_gradsync_bytes(2, 4, p, layers).total() ==
        doctest::Approx(4000 + 1000 + 1000 + 2 * 1000 + 1000));
  CHECK(zero_gradsync_bytes(3, 4, p, layers).params == doctest::Approx(1000 + 2 * 1000));
  CHECK(zero_gradsync_bytes(3, 4, p, layers).total() == doctest::Approx(3000 + 4 * 1000));
  CHECK(zero_gradsync_bytes(3, 2, p, {100, 800, 100}).grads == doctest::Approx(2000 + 4 * 900));
  CHECK_THROWS_AS(zero_gradsync_bytes(4, 2, p), ConfigError);
  CHECK_THROWS_AS(zero_step_bytes(1, 0, p), ConfigError);
}

}  // namespace gradsync::cost
