#include "experiments/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "common/wire_format.h"

namespace gradsync::cost {

namespace {

constexpr const char* kWhere = "cost model";
// The unit a shard updates and answers (wire::kChunkKeys floats).
constexpr double kPsChunkBytes = static_cast<double>(wire::kChunkKeys * sizeof(float));

void validate(const Scenario& s) {
  if (s.workers < 1) {
    throw ConfigError(kWhere, "workers", "must be at least 1, got " + std::to_string(s.workers));
  }
  if (s.servers < 1) {
    throw ConfigError(kWhere, "servers", "must be at least 1, got " + std::to_string(s.servers));
  }
  if (s.buckets < 1) {
    throw ConfigError(kWhere, "buckets", "must be at least 1, got " + std::to_string(s.buckets));
  }
  // Written as !(x >= 0) so that NaN is refused too.
  if (!(s.model_bytes >= 0) || std::isinf(s.model_bytes)) {
    throw ConfigError(kWhere, "model_bytes",
                      "must be a finite size >= 0, got " + std::to_string(s.model_bytes));
  }
}

}  // namespace

int ring_buckets(double model_bytes, double bucket_mb) {
  if (!(bucket_mb > 0)) return 1;
  return std::max(1, static_cast<int>(std::ceil(model_bytes / (bucket_mb * double(1 << 20)))));
}

Scheme parse_scheme(const std::string& name) {
  if (name == "dp") return Scheme::kDp;
  if (name == "ps") return Scheme::kPs;
  if (name == "ring" || name == "allreduce") return Scheme::kRing;
  throw ConfigError(kWhere, "scheme",
                    "unknown scheme '" + name + "' (valid: dp, ps, ring, allreduce)");
}

std::string scheme_name(Scheme scheme) {
  switch (scheme) {
    case Scheme::kDp:
      return "dp";
    case Scheme::kPs:
      return "ps";
    case Scheme::kRing:
      return "ring";
  }
  return "?";
}

double LinkParams::gbps() const {
  if (beta_s_per_byte <= 0) return std::numeric_limits<double>::infinity();
  return 8.0 / beta_s_per_byte / 1e9;  // bytes/s -> bits/s -> Gbit/s
}

CostTerms step_terms(const Scenario& s) {
  validate(s);
  const double n = s.workers;
  const double bytes = s.model_bytes;
  switch (s.scheme) {
    case Scheme::kDp:
      // Replica 0's one link carries N-1 incoming gradients, then N-1 outgoing parameter copies;
      // the second phase cannot start before the update, so nothing overlaps.
      return {2 * (n - 1), 2 * (n - 1) * bytes};
    case Scheme::kPs: {
      // Push and pull are pipelined by chunk and the links are full duplex, so the step costs
      // one direction's bytes on the slower of the two links: a worker's (S) or a shard's
      // (every one of N workers sends it S/K); plus the pipeline's drain: once the last chunk
      // has arrived from everyone, its replies still go out, N of them through a shard's link
      // (or K through a worker's, when the workers' links are the slower ones). With one chunk
      // per shard there is no pipeline at all and this gives push-then-pull.
      const double k = s.servers;
      const double shard_bytes = n * bytes / k;
      const double chunk = std::min(kPsChunkBytes, bytes / k);
      return {2, std::max(bytes, shard_bytes) + std::max(n, k) * chunk};
    }
    case Scheme::kRing:
      // Reduce-scatter and all-gather take N-1 rounds each, one segment of S/N per round per
      // link; every bucket is its own all-reduce, so the rounds (and latencies) repeat per bucket
      // while the bytes add up to the same 2(N-1)/N * S.
      return {2 * (n - 1) * s.buckets, 2 * (n - 1) / n * bytes * s.wire_fraction};
  }
  return {};
}

double busiest_node_bytes(const Scenario& s) {
  validate(s);
  const double n = s.workers;
  const double bytes = s.model_bytes;
  switch (s.scheme) {
    case Scheme::kDp:
      return 2 * (n - 1) * bytes;  // replica 0: (N-1)S in, (N-1)S out
    case Scheme::kPs:
      return std::max(2 * bytes, 2 * n * bytes / s.servers);  // a worker or a shard, in + out
    case Scheme::kRing:
      // every worker sends and receives 2(N-1)/N * S, compressed by the wire fraction
      return 2 * (2 * (n - 1) / n * bytes) * s.wire_fraction;
  }
  return 0;
}

int ps_servers_to_beat_ring(int workers, double model_bytes, const LinkParams& link,
                            int max_servers) {
  const double ring = step_terms({Scheme::kRing, workers, 1, model_bytes, 1}).seconds(link);
  // "Faster" means faster by more than rounding: ps at N=2, K>=2 moves exactly the ring's S,
  // and float noise must not turn that tie into a win.
  const double margin = ring * 1e-12;
  for (int k = 1; k <= max_servers; ++k) {
    const double ps = step_terms({Scheme::kPs, workers, k, model_bytes, 1}).seconds(link);
    if (ps < ring - margin) return k;
  }
  return 0;
}

double ring_wire_fraction(const Compression& c, int workers) {
  if (c.method == "none") return 1;
  if (c.method == "fp16" || c.method == "bf16") return 0.5;
  if (c.method == "powersgd") {
    if (!(c.parameters > 0) || !(c.powersgd_floats >= 0)) {
      throw ConfigError(kWhere, "powersgd", "needs the model's parameters and the floats sent");
    }
    return c.powersgd_floats / c.parameters;
  }
  if (c.method == "topk") {
    if (!(c.topk_ratio > 0 && c.topk_ratio <= 1)) {
      throw ConfigError(kWhere, "topk_ratio", "must be in (0, 1]");
    }
    return static_cast<double>(workers) * c.topk_ratio;  // (N-1) 8k / (2(N-1)/N 4n)
  }
  throw ConfigError(kWhere, "compression",
                    "unknown method '" + c.method + "' (valid: none, fp16, bf16, powersgd, topk)");
}

namespace {

void validate_zero(int stage, int ranks, double params, int max_stage) {
  if (stage < 0 || stage > max_stage) {
    throw ConfigError(
        kWhere, "zero.stage",
        "must be 0 (allreduce) to " + std::to_string(max_stage) + ", got " + std::to_string(stage));
  }
  validate({Scheme::kRing, ranks, 1, params, 1});
}

}  // namespace

ZeroMemory zero_paper_bytes(int stage, int ranks, double params) {
  validate_zero(stage, ranks, params, 3);
  const double full = 4 * params, shard = full / ranks;
  return {stage >= 3 ? shard : full, stage >= 2 ? shard : full, stage >= 1 ? shard : full};
}

ZeroMemory zero_gradsync_bytes(int stage, int ranks, double params,
                               const std::vector<double>& layers) {
  validate_zero(stage, ranks, params, 3);
  const double full = 4 * params, shard = full / ranks;
  if (stage == 0) return {full, full, full};
  if (stage == 1) return {full + shard, full + shard, shard};
  const std::vector<double> n = layers.empty() ? std::vector<double>{params} : layers;
  // The moment of the peak: backward at the layer whose window is largest (stage 2 counts the
  // gradients only; the model keeps all its parameters).
  double gathered = 0, grads = 0, worst = -1;
  for (std::size_t l = 0; l < n.size(); ++l) {
    const double before = l > 0 ? n[l - 1] : 0, after = l + 1 < n.size() ? n[l + 1] : 0;
    const double window = (stage == 3 ? before + n[l] : 0) + n[l] + after;
    if (window > worst) {
      worst = window;
      gathered = before + n[l];
      grads = n[l] + after;
    }
  }
  if (stage == 2) return {full + shard, shard + 4 * grads, shard};
  return {shard + 4 * gathered, shard + 4 * grads, shard};
}

double zero_step_bytes(int stage, int ranks, double params) {
  validate_zero(stage, ranks, params, 3);
  const double n = ranks;
  return (stage == 3 ? 3 : 2) * (n - 1) / n * 4 * params;
}

namespace {

void validate_hosts(int hosts, int ranks_per_host, double model_bytes) {
  if (hosts < 1) {
    throw ConfigError(kWhere, "hosts", "must be at least 1, got " + std::to_string(hosts));
  }
  if (ranks_per_host < 1) {
    throw ConfigError(kWhere, "ranks per host",
                      "must be at least 1, got " + std::to_string(ranks_per_host));
  }
  validate({Scheme::kRing, hosts * ranks_per_host, 1, model_bytes, 1});
}

}  // namespace

HostBytes flat_ring_host_bytes(int hosts, int ranks_per_host, double model_bytes) {
  validate_hosts(hosts, ranks_per_host, model_bytes);
  const double n = double(hosts) * ranks_per_host;
  const double per_link = 2 * (n - 1) / n * model_bytes;
  const double crossing = hosts > 1 ? hosts : 0;  // links whose right neighbour is elsewhere
  return {(n - crossing) * per_link, crossing * per_link};
}

HostBytes hierarchical_host_bytes(int hosts, int ranks_per_host, double model_bytes) {
  validate_hosts(hosts, ranks_per_host, model_bytes);
  const double l = ranks_per_host;
  const double h = hosts;
  // Per host: the all-reduce within it, then (with other hosts) the leader's broadcast.
  const double within = 2 * (l - 1) * model_bytes + (hosts > 1 ? (l - 1) * model_bytes : 0);
  return {h * within, 2 * (h - 1) * model_bytes};
}

LinkParams calibrate(std::span<const Observation> observations) {
  constexpr const char* kWhat = "calibration";
  // Dividing each row by its measurement turns the relative error into an ordinary least
  // squares problem: minimise sum (x_i alpha + y_i beta - 1)^2 with x_i = messages_i / m_i and
  // y_i = bytes_i / m_i.
  double sxx = 0, sxy = 0, syy = 0, sx = 0, sy = 0;
  int used = 0;
  for (const Observation& o : observations) {
    if (!(o.measured_s > 0) || std::isinf(o.measured_s)) continue;
    const CostTerms terms = step_terms(o.scenario);
    const double x = terms.messages / o.measured_s;
    const double y = terms.bytes / o.measured_s;
    sxx += x * x;
    sxy += x * y;
    syy += y * y;
    sx += x;
    sy += y;
    ++used;
  }
  if (used < 2) {
    throw ConfigError(kWhat, "runs",
                      "need at least 2 runs with a measured communication time > 0 to fit "
                      "latency and bandwidth, got " +
                          std::to_string(used));
  }
  // The two columns are separable only if they are not proportional. Cauchy-Schwarz gives
  // sxy^2 <= sxx*syy with equality exactly then; compare the normalised determinant
  // 1 - cos^2 (scale-free, as messages and bytes differ by ~8 orders of magnitude).
  const char* kInseparable =
      "these runs cannot separate latency from bandwidth (their message and byte counts are "
      "proportional); add runs with other worker counts, model sizes or strategies";
  if (sxx <= 0 || syy <= 0) throw ConfigError(kWhat, "runs", kInseparable);
  const double cos2 = (sxy / sxx) * (sxy / syy);
  if (1 - cos2 < 1e-10) throw ConfigError(kWhat, "runs", kInseparable);

  const double det = sxx * syy - sxy * sxy;
  LinkParams fit{(sx * syy - sy * sxy) / det, (sy * sxx - sx * sxy) / det};
  if (fit.alpha_s >= 0 && fit.beta_s_per_byte >= 0) return fit;

  // The unconstrained optimum has a negative component, so the constrained one lies on an
  // axis. Fit each parameter alone (clamped at 0) and keep the smaller residual:
  // sum (x a + y b - 1)^2 = sxx a^2 + syy b^2 + 2 sxy a b - 2 sx a - 2 sy b + n.
  const auto residual = [&](const LinkParams& p) {
    const double a = p.alpha_s, b = p.beta_s_per_byte;
    return sxx * a * a + syy * b * b + 2 * sxy * a * b - 2 * sx * a - 2 * sy * b + used;
  };
  const LinkParams alpha_only{std::max(0.0, sx / sxx), 0};
  const LinkParams beta_only{0, std::max(0.0, sy / syy)};
  return residual(alpha_only) < residual(beta_only) ? alpha_only : beta_only;
}

}  // namespace gradsync::cost
