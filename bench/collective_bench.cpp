#include "bench/collective_bench.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>

#include "allreduce/communicator.h"
#include "allreduce/in_memory_store.h"
#include "allreduce/tcp/tcp_ring.h"
#include "common/error.h"
#ifndef GRADSYNC_HAVE_GLOO
#define GRADSYNC_HAVE_GLOO 0  // CMake defines it to 1 when libgloo-dev is found
#endif
#if GRADSYNC_HAVE_GLOO
#include "bench/gloo_ring.h"
#endif
#include "bench/nccl_bench.h"
#include "bench/sprint.h"

namespace gradsync {
namespace {

constexpr const char* kWhere = "bench";
// gradsync's side of the comparison: one TcpRing per rank.
class TcpRingRank final : public BenchRank {
 public:
  TcpRingRank(const CollectiveOp& op, std::unique_ptr<Communicator> comm)
      : op_(op), comm_(std::move(comm)) {}
  void barrier() override { comm_->barrier(); }
  void run(RankBuffers& buffers) override { op_.run(*comm_, buffers); }

 private:
  const CollectiveOp& op_;
  std::unique_ptr<Communicator> comm_;
};

void validate(const CollectiveBenchOptions& o) {
  find_collective_op(o.op);
  auto fail = [](const std::string& key, const std::string& problem) {
    throw ConfigError(kWhere, key, problem);
  };
  if (o.ranks < 1 || o.ranks > kMaxRanks) {
    fail("--ranks",
         "must be 1.." + std::to_string(kMaxRanks) + " (got " + std::to_string(o.ranks) + ")");
  }
  if (o.min_bytes < sizeof(float)) fail("--minbytes", "must be at least 4 (one float)");
  if (o.max_bytes < o.min_bytes) fail("--maxbytes", "is smaller than --minbytes");
  if (o.factor < 2) fail("--stepfactor", "must be at least 2");
  if (o.warmup < 0) fail("--warmup", "must not be negative");
  if (o.iters < 0) fail("--iters", "must not be negative (0 means auto)");
  if (o.timeout.count() <= 0) fail("--timeout", "must be positive");
}

std::vector<std::size_t> sweep_sizes(const CollectiveBenchOptions& o) {
  std::vector<std::size_t> sizes;
  const auto factor = static_cast<std::size_t>(o.factor);
  for (std::size_t s = o.min_bytes;; s *= factor) {
    sizes.push_back(s);
    // Stop before the next size would pass max (or overflow).
    if (s > o.max_bytes / factor) break;
  }
  return sizes;
}

double gb_per_s(std::size_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
}

// The table, or with o.json one JSON object per row. Table columns are as wide as their
// headers (at least 10) and right-aligned, so rows line up under the header for any size.
// `transport` names what ran for the header ("TcpRing over TCP 127.0.0.1") and for JSON
// ("tcp-ring").
struct Transport {
  std::string text;
  std::string json;
};

std::string render(const CollectiveBenchOptions& o, const CollectiveOp& op,
                   const std::vector<SizeResult>& ours,
                   const std::optional<std::vector<SizeResult>>& theirs,
                   const std::string& gloo_line, const Transport& transport) {
  std::vector<std::string> headers = {"size(B)",     "count(elems)", "type",  "time(us)",
                                      "algbw(GB/s)", "busbw(GB/s)",  "#wrong"};
  if (theirs) {
    headers.insert(headers.end(), {"gloo time(us)", "gloo busbw(GB/s)", "gloo #wrong",
                                   "ratio(busbw gradsync/gloo)"});
  }
  std::vector<int> widths;
  for (const auto& h : headers) widths.push_back(std::max<int>(10, static_cast<int>(h.size())));
  auto line = [&](const std::vector<std::string>& cells, bool header) {
    std::string text = header ? "#" : " ";
    for (std::size_t c = 0; c < cells.size(); ++c) {
      text += sprint("  %*s", widths[c], cells[c].c_str());
    }
    return text + "\n";
  };

  const double factor = op.bus_factor(o.ranks);
  std::string out;
  if (!o.json) {
    out += sprint(
        "# gradsync bench: op %s (float, %s), ranks %d (threads of one process), transport "
        "%s\n# warm-up %d; timed iterations %s; time: max over ranks of "
        "the mean per-iteration time; busbw = algbw * %.4g\n# %s\n#\n",
        op.name.c_str(), op.layout, o.ranks, transport.text.c_str(), o.warmup,
        o.iters > 0 ? std::to_string(o.iters).c_str() : "auto (~0.3 s a row)", factor,
        gloo_line.c_str());
    out += line(headers, true);
  }
  for (std::size_t r = 0; r < ours.size(); ++r) {
    const SizeResult& g = ours[r];
    const SizeResult* t = theirs ? &(*theirs)[r] : nullptr;
    const double algbw = gb_per_s(g.bytes, g.seconds);
    const double busbw = algbw * factor;
    const double their_busbw = t != nullptr ? gb_per_s(t->bytes, t->seconds) * factor : 0.0;
    const double ratio = their_busbw > 0 ? busbw / their_busbw : 0.0;
    if (o.json) {
      out += sprint(
          "{\"op\": \"%s\", \"ranks\": %d, \"transport\": \"%s\", \"type\": \"float\", "
          "\"size_bytes\": %zu, \"count\": %zu, \"bytes_per_rank\": %.0f, \"iters\": %d, "
          "\"time_us\": %.3f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"wrong\": %llu",
          op.name.c_str(), o.ranks, transport.json.c_str(), g.bytes, g.count, factor * g.bytes,
          g.iters, g.seconds * 1e6, algbw, busbw, static_cast<unsigned long long>(g.wrong));
      if (t != nullptr) {
        out += sprint(
            ", \"gloo_iters\": %d, \"gloo_time_us\": %.3f, \"gloo_busbw_gbps\": %.4f, "
            "\"gloo_wrong\": %llu, \"busbw_ratio\": %.4f",
            t->iters, t->seconds * 1e6, their_busbw, static_cast<unsigned long long>(t->wrong),
            ratio);
      }
      out += "}\n";
      continue;
    }
    std::vector<std::string> cells = {std::to_string(g.bytes), std::to_string(g.count), "float"};
    cells.insert(cells.end(), {sprint("%.1f", g.seconds * 1e6), sprint("%.2f", algbw),
                               sprint("%.2f", busbw), std::to_string(g.wrong)});
    if (t != nullptr) {
      cells.insert(cells.end(), {sprint("%.1f", t->seconds * 1e6), sprint("%.2f", their_busbw),
                                 std::to_string(t->wrong), sprint("%.2f", ratio)});
    }
    out += line(cells, false);
  }
  return out;
}

}  // namespace

std::size_t parse_size(const std::string& text) {
  auto bad = [&]() -> ConfigError {
    return ConfigError(kWhere, "size", "'" + text + "' is not a size (examples: 512, 4K, 64M, 1G)");
  };
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) {
    ++digits;
  }
  if (digits == 0 || digits > 18) throw bad();  // 18 digits cannot overflow 64 bits
  std::size_t value = std::stoull(text.substr(0, digits));
  std::string suffix = text.substr(digits);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  // An empty suffix is bytes; K, M, G are powers of 1024, as in nccl-tests' -b and -e.
  const std::string units = "KMG";
  const auto unit = suffix.size() == 1
                        ? units.find(static_cast<char>(std::toupper((unsigned char)suffix[0])))
                        : std::string::npos;
  if (!suffix.empty() && unit == std::string::npos) throw bad();
  const int shift = suffix.empty() ? 0 : 10 * static_cast<int>(unit + 1);
  if (value > (std::numeric_limits<std::size_t>::max() >> shift)) throw bad();
  return value << shift;
}

namespace {

// The sweep the options describe, for either transport.
SweepSpec sweep_spec(const CollectiveBenchOptions& options, const CollectiveOp& op) {
  return {.op = &op,
          .ranks = options.ranks,
          .sizes = sweep_sizes(options),
          .warmup = options.warmup,
          .iters = options.iters,
          .timeout = options.timeout};
}

}  // namespace

std::string run_collective_bench(const CollectiveBenchOptions& options) {
  return run_collective_bench_report(options).text;
}

CollectiveBenchReport run_collective_bench_report(const CollectiveBenchOptions& options) {
  auto wrong_in = [](const std::vector<SizeResult>& rows) {
    std::uint64_t wrong = 0;
    for (const SizeResult& row : rows) wrong += row.wrong;
    return wrong;
  };
  if (options.device == "gpu") {
    CollectiveBenchOptions gpu = options;
    const GpuSweep sweep = nccl_sweep_setup(gpu.ranks);  // fills in ranks; refuses without NCCL/GPU
    validate(gpu);
    const CollectiveOp& op = find_collective_op(gpu.op);
    const std::vector<SizeResult> nccl = nccl_measure(sweep_spec(gpu, op));
    return {render(gpu, op, nccl, std::nullopt,
                   "gloo: not run with --device gpu (it has no CUDA transport here)",
                   {sweep.transport, "nccl"}),
            wrong_in(nccl), 0};
  }
  if (options.device != "cpu") {
    throw ConfigError(kWhere, "--device", "'" + options.device + "' (valid: cpu, gpu)");
  }
  validate(options);
  const CollectiveOp& op = find_collective_op(options.op);
  const SweepSpec spec = sweep_spec(options, op);

  // The Store must outlive every ring made over it (make_tcp_ring's contract).
  InMemoryStore store;
  TcpRingOptions ring_options;
  ring_options.timeout = options.timeout;
  ring_options.store_prefix = "bench";
  const std::vector<SizeResult> ours =
      measure_sweep(spec, [&](int rank) -> std::unique_ptr<BenchRank> {
        return std::make_unique<TcpRingRank>(
            op, make_tcp_ring(store, rank, options.ranks, ring_options));
      });

  // Gloo's columns exist only when it really ran: no build, no flag or no counterpart means no
  // columns, and the header line says which.
  std::optional<std::vector<SizeResult>> theirs;
  std::string gloo_line = "gloo: not compiled in (no columns)";
#if GRADSYNC_HAVE_GLOO
  if (!options.gloo) {
    gloo_line = "gloo: off (--no-gloo)";
  } else {
    theirs = gloo_measure(spec);
    gloo_line = theirs ? "gloo " + gloo_version() + ": " + gloo_algorithm(op.name) +
                             ", TCP over 127.0.0.1, same sizes and timing rules"
                       : "gloo: no comparison for " + op.name + " with " +
                             std::to_string(options.ranks) + " rank(s) (needs 2 or more)";
  }
#endif
  return {render(options, op, ours, theirs, gloo_line, {"TcpRing over TCP 127.0.0.1", "tcp-ring"}),
          wrong_in(ours), theirs ? wrong_in(*theirs) : 0};
}

}  // namespace gradsync
