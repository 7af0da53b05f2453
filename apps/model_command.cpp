#include "apps/model_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/size_options.h"
#include "bench/collective_bench.h"
#include "common/error.h"
#include "experiments/calibration_runs.h"
#include "experiments/cost_model.h"

namespace gradsync {

namespace {

// ResNet-50's 25,557,032 float32 parameters: the gradient volume DDP's papers quote.
constexpr double kResNet50Bytes = 25'557'032.0 * 4;
constexpr int kMaxServers = 1024;  // how far the "ps wins K>=" column looks

// Printed under the table: why the columns grow as they do.
constexpr const char* kExplanation =
    R"(dp's replica 0 moves every gradient in and every copy out, 2(N-1)S: linear in N. A ring
link carries 2(N-1)/N*S -> 2S, so the ring's bandwidth term is flat in N; only its
2(N-1)B latencies grow. A ps worker moves S each way, half the ring's, but a shard moves
N*S/K: ps wins once K exceeds about N/2, or with fewer shards where ring latency dominates.
)";

struct ModelOptions {
  std::string bytes;  // empty: kResNet50Bytes
  double gbps = 10;
  double latency_us = 25;
  std::vector<int> workers = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  std::vector<int> servers = {1, 4};
  double bucket_mb = 25;
  std::string compression = "none";  // the ring's (comm.compression)
  double topk_ratio = 0.01;
  double powersgd_fraction = 0;  // powersgd: floats sent over the model's
  std::string calibrate_dir;
  bool json = false;
};

std::string format(const char* fmt, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, fmt, value);
  return buffer;
}

// Milliseconds or megabytes in a table cell: one decimal while small, whole numbers above 1000.
std::string cell(double value) { return format(value < 1000 ? "%.1f" : "%.0f", value); }

// A markdown table whose columns line up in a terminal: numbers right-aligned.
std::string render_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows,
                         const std::vector<bool>& left_aligned = {}) {
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c)
    width[c] = std::max<std::size_t>(3, header[c].size());
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  const auto left = [&](std::size_t c) { return c < left_aligned.size() && left_aligned[c]; };
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string out = "|";
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(width[c] - cells[c].size(), ' ');
      out += " " + (left(c) ? cells[c] + pad : pad + cells[c]) + " |";
    }
    return out + "\n";
  };
  std::string out = line(header) + "|";
  for (std::size_t c = 0; c < header.size(); ++c) {
    out += left(c) ? std::string(width[c] + 2, '-') : std::string(width[c] + 1, '-') + ":";
    out += "|";
  }
  out += "\n";
  for (const auto& row : rows) out += line(row);
  return out;
}

double model_bytes(const ModelOptions& o) {
  if (o.bytes.empty()) return kResNet50Bytes;
  return static_cast<double>(parse_size(o.bytes));  // checked while parsing: byte_size()
}

int print_model(const ModelOptions& o) {
  const double bytes = model_bytes(o);
  const cost::LinkParams link{o.latency_us * 1e-6, 8.0 / (o.gbps * 1e9)};
  const int buckets = cost::ring_buckets(bytes, o.bucket_mb);
  cost::Compression compression{o.compression, o.topk_ratio, o.powersgd_fraction, 1.0};
  std::cout << "alpha-beta model: S = " << format("%.1f", bytes / 1e6) << " MB of gradients, link "
            << format("%g", o.gbps)
            << " Gbit/s (beta = " << format("%.3g", link.beta_s_per_byte * 1e9)
            << " ns/byte),\nalpha = " << format("%g", o.latency_us)
            << " us per message; the ring reduces in B = " << buckets
            << (buckets == 1 ? " bucket" : " buckets") << " of " << format("%g", o.bucket_mb)
            << " MiB\n\n"
            << "ms: communication per step; MB: bytes sent + received per step by the busiest "
               "node;\npsK: parameter server with K shards; ps wins K>=: the fewest shards (up to "
            << kMaxServers << ")\nwith which ps is faster than a one-bucket ring\n\n";

  std::vector<std::string> header = {"N", "dp ms"};
  for (int k : o.servers) header.push_back("ps" + std::to_string(k) + " ms");
  header.push_back("ring ms");
  header.push_back("dp MB");
  for (int k : o.servers) header.push_back("ps" + std::to_string(k) + " MB");
  header.push_back("ring MB");
  header.push_back("ps wins K>=");

  std::vector<std::vector<std::string>> rows;
  for (int n : o.workers) {
    std::vector<cost::Scenario> scenarios = {{cost::Scheme::kDp, n, 1, bytes, 1}};
    for (int k : o.servers) scenarios.push_back({cost::Scheme::kPs, n, k, bytes, 1});
    scenarios.push_back(
        {cost::Scheme::kRing, n, 1, bytes, buckets, cost::ring_wire_fraction(compression, n)});
    std::vector<std::string> row = {std::to_string(n)};
    for (const auto& s : scenarios) row.push_back(cell(cost::step_terms(s).seconds(link) * 1e3));
    for (const auto& s : scenarios) row.push_back(cell(cost::busiest_node_bytes(s) / 1e6));
    const int k = cost::ps_servers_to_beat_ring(n, bytes, link, kMaxServers);
    row.push_back(k == 0 ? "never" : std::to_string(k));
    rows.push_back(row);
  }
  std::cout << render_table(header, rows) << "\n";
  std::cout << kExplanation;
  return 0;
}

std::string strategy_of(cost::Scheme scheme) {
  return scheme == cost::Scheme::kRing ? "allreduce" : cost::scheme_name(scheme);
}

int print_calibration(const ModelOptions& o) {
  std::vector<std::string> skipped;
  const std::vector<cost::Observation> observations = read_observations(o.calibrate_dir, &skipped);
  // On stderr so that --json stays parseable; also before fitting, so that a fit that fails for
  // want of runs shows which runs were left out.
  for (const std::string& note : skipped) std::cerr << "gradsync model: skipped " << note << "\n";
  const cost::LinkParams link = cost::calibrate(observations);

  nlohmann::json runs = nlohmann::json::array();
  std::vector<std::vector<std::string>> rows;
  for (const cost::Observation& obs : observations) {
    const double predicted = cost::step_terms(obs.scenario).seconds(link);
    const bool has_measurement = obs.measured_s > 0;
    const double error = has_measurement ? (predicted - obs.measured_s) / obs.measured_s : 0.0;
    runs.push_back({{"run", obs.label},
                    {"scheme", cost::scheme_name(obs.scenario.scheme)},
                    {"workers", obs.scenario.workers},
                    {"servers", obs.scenario.servers},
                    {"buckets", obs.scenario.buckets},
                    {"model_bytes", obs.scenario.model_bytes},
                    {"measured_s", obs.measured_s},
                    {"predicted_s", predicted},
                    {"error", has_measurement ? nlohmann::json(error) : nlohmann::json(nullptr)}});
    const bool ps = obs.scenario.scheme == cost::Scheme::kPs;
    rows.push_back(
        {obs.label, strategy_of(obs.scenario.scheme), std::to_string(obs.scenario.workers),
         ps ? std::to_string(obs.scenario.servers) : "-", format("%.2f", obs.measured_s * 1e3),
         format("%.2f", predicted * 1e3), has_measurement ? format("%+.1f", error * 100) : "-"});
  }
  const double gbps = link.gbps();
  if (o.json) {
    const nlohmann::json out = {
        {"results_dir", o.calibrate_dir},
        {"alpha_s", link.alpha_s},
        {"beta_s_per_byte", link.beta_s_per_byte},
        {"gbps", std::isfinite(gbps) ? nlohmann::json(gbps) : nlohmann::json(nullptr)},
        {"runs", runs},
        {"skipped", skipped},
    };
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  const std::string bandwidth =
      std::isfinite(gbps) ? format("%.3g", gbps) + " Gbit/s" : "unlimited";
  std::cout << "calibrated on " << observations.size() << " runs in " << o.calibrate_dir
            << ":\nalpha = " << format("%.1f", link.alpha_s * 1e6)
            << " us per message, bandwidth = " << bandwidth
            << " (beta = " << format("%.3g", link.beta_s_per_byte * 1e9) << " ns/byte)\n\n"
            << render_table({"run", "strategy", "N", "K", "measured ms", "predicted ms", "error %"},
                            rows, {true, true})
            << "\nmeasured = communicate + wait per step (summary.json); error = predicted / "
               "measured - 1.\n";
  if (std::isfinite(gbps)) {
    std::cout << "the model with this link: gradsync model --latency-us "
              << format("%.4g", link.alpha_s * 1e6) << " --gbps " << format("%.3g", gbps) << "\n";
  }
  return 0;
}

}  // namespace

Command add_model_command(CLI::App& parent) {
  auto options = std::make_shared<ModelOptions>();
  CLI::App* app = parent.add_subcommand(
      "model", "alpha-beta cost of dp, ps and the ring per step, or --calibrate on measured runs");
  app->add_option("--bytes", options->bytes,
                  "model size S: 102228128, 512K, 100M, 1G (default: ResNet-50's 25,557,032 "
                  "float32 parameters, 102.2 MB)")
      ->check(byte_size(1));
  app->add_option("--gbps", options->gbps, "link bandwidth, Gbit/s")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app->add_option("--latency-us", options->latency_us, "latency (alpha) per message, us")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app->add_option("--workers", options->workers, "worker counts N, one row each")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app->add_option("--servers", options->servers, "ps shard counts K, one column each")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app->add_option("--bucket-mb", options->bucket_mb,
                  "ring bucket size in MiB (B = ceil(S / bucket), DDP's default 25)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app->add_option("--compression", options->compression,
                  "the ring's gradient compression (comm.compression): its bytes scaled by the "
                  "method's wire fraction")
      ->check(CLI::IsMember({"none", "fp16", "bf16", "powersgd", "topk"}))
      ->capture_default_str();
  app->add_option("--topk-ratio", options->topk_ratio, "topk: fraction of values sent")
      ->check(CLI::Range(1e-6, 1.0))
      ->capture_default_str();
  app->add_option("--powersgd-fraction", options->powersgd_fraction,
                  "powersgd: floats sent per step over the model's (sum of (n + m) r and the "
                  "1-D tensors, over the parameters)")
      ->check(CLI::Range(1e-9, 1.0));
  CLI::Option* calibrate =
      app->add_option("--calibrate", options->calibrate_dir,
                      "fit alpha and beta to the runs of a results folder (of `gradsync run` or "
                      "`gradsync sweep`, or one run folder)");
  app->add_flag("--json", options->json, "with --calibrate: print one JSON object")
      ->needs(calibrate);

  return {app, [options]() -> int {
            if (!options->calibrate_dir.empty()) return print_calibration(*options);
            if (options->compression == "powersgd" && options->powersgd_fraction <= 0) {
              throw ConfigError("gradsync model", "--powersgd-fraction",
                                "--compression powersgd needs the fraction of the model's floats "
                                "it sends");
            }
            return print_model(*options);
          }};
}

}  // namespace gradsync
