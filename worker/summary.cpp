#include "worker/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/error.h"
#include "worker/provenance.h"

namespace gradsync {
namespace {

std::string format(const char* fmt, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, fmt, value);
  return buffer;
}

std::string human_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return format(unit == 0 ? "%.0f" : "%.1f", value) + " " + units[unit];
}

// A rank's step totals less `waited`, the time it spent waiting out another rank's work
// between steps (rank 0's evaluations and checkpoints): out of wait_s first, then
// communicate_s.
StepStats less_waited(StepStats t, double waited) {
  const double from_wait = std::min(waited, t.wait_s);
  t.wait_s -= from_wait;
  waited -= from_wait;
  t.communicate_s -= std::min(waited, t.communicate_s);
  return t;
}

// The q-quantile (0 < q <= 1) by the nearest-rank rule: the smallest value with at least q of
// the values at or below it.
double quantile(const std::vector<float>& sorted, double q) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size(), std::max<std::size_t>(rank, 1)) - 1];
}

StepPercentiles percentiles(int rank, std::vector<float> steps) {
  std::sort(steps.begin(), steps.end());
  return {rank, quantile(steps, 0.5), quantile(steps, 0.9), quantile(steps, 0.99),
          steps.empty() ? 0.0 : double(steps.back())};
}

}  // namespace

std::optional<SlowestRank> slowest_rank(const std::vector<StepPercentiles>& ranks) {
  if (ranks.size() < 2) return std::nullopt;
  // max_element keeps the first of equals: a tie goes to the lower position, in rank order.
  const auto slowest = std::max_element(
      ranks.begin(), ranks.end(),
      [](const StepPercentiles& a, const StepPercentiles& b) { return a.p99 < b.p99; });
  std::vector<double> others;
  for (auto it = ranks.begin(); it != ranks.end(); ++it) {
    if (it != slowest) others.push_back(it->p99);
  }
  std::sort(others.begin(), others.end());
  const std::size_t middle = others.size() / 2;
  const double median =
      others.size() % 2 == 1 ? others[middle] : (others[middle - 1] + others[middle]) / 2;
  return SlowestRank{slowest->rank, slowest->p99, median};
}

RunSummary summarize(const Config& config, std::int64_t parameters,
                     const std::vector<LoopResult>& per_rank,
                     const std::vector<NodeTraffic>& other_nodes, const std::vector<int>& ranks) {
  GRADSYNC_CHECK(!per_rank.empty(), "a run has at least one rank");
  GRADSYNC_CHECK(ranks.empty() || ranks.size() == per_rank.size(), "a rank for every result");
  const LoopResult& lead = per_rank.front();
  RunSummary s;
  s.run = config.name;
  s.strategy = config.strategy;
  if (uses_communicator(config.strategy)) {
    // What the ranks ran (auto's choice included), else what the configuration implies.
    s.backend = !lead.backend.empty()           ? lead.backend
                : config.comm.backend != "auto" ? config.comm.backend
                : config.device == "gpu"        ? "nccl"
                                                : "tcp";
  }
  s.workers = config.workers;
  s.global_batch = static_cast<std::int64_t>(config.train.batch) * config.workers *
                   config.train.accumulation_steps;
  s.steps = lead.steps;
  s.parameters = parameters;
  // Synchronous ranks move in lockstep, so rank 0's clock is the run's clock.
  s.train_seconds = lead.train_seconds;
  if (s.train_seconds > 0) {
    s.samples_per_s = static_cast<double>(s.steps * s.global_batch) / s.train_seconds;
  }
  s.target_accuracy = config.train.target_accuracy;
  s.evals = lead.evals;
  if (!s.evals.empty()) {
    s.final_test_accuracy = s.evals.back().test_accuracy;
    s.final_test_loss = s.evals.back().test_loss;
  }
  for (const EvalPoint& e : s.evals) {
    if (e.test_accuracy >= s.target_accuracy) {
      s.time_to_accuracy_s = e.train_seconds;
      break;
    }
  }
  // In a synchronous run every rank waits for the one that spent the most between steps, inside
  // its next step's wait or communication: that much less its own. async and ssp ranks do not
  // wait for each other step by step: their totals stay as measured.
  const bool lockstep = config.strategy != "ps" || config.ps.mode == "sync";
  double most_between = 0;
  for (const LoopResult& each : per_rank)
    most_between = std::max(most_between, each.between_steps_s);
  double rank_steps = 0;
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    const StepStats t =
        lockstep ? less_waited(per_rank[r].totals, most_between - per_rank[r].between_steps_s)
                 : per_rank[r].totals;
    const std::uint64_t bytes = t.bytes_sent + t.bytes_received;
    if (bytes > s.busiest_bytes) {
      s.busiest_bytes = bytes;
      // dp's replicas are threads of one process, not ranks of a process group.
      s.busiest_node = (config.strategy == "dp" ? "replica " : "rank ") +
                       std::to_string(ranks.empty() ? int(r) : ranks[r]);
    }
    s.mean_step.compute_s += t.compute_s;
    s.mean_step.communicate_s += t.communicate_s;
    s.mean_step.wait_s += t.wait_s;
    rank_steps += static_cast<double>(per_rank[r].steps);
    s.peak_model_state_bytes =
        std::max(s.peak_model_state_bytes, per_rank[r].peak_model_state_bytes);
    s.peak_params_bytes = std::max(s.peak_params_bytes, per_rank[r].peak_params_bytes);
    s.peak_grads_bytes = std::max(s.peak_grads_bytes, per_rank[r].peak_grads_bytes);
    s.peak_optimizer_bytes = std::max(s.peak_optimizer_bytes, per_rank[r].peak_optimizer_bytes);
  }
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    s.step_time.push_back(percentiles(ranks.empty() ? int(r) : ranks[r], per_rank[r].step_seconds));
  }
  s.slowest = slowest_rank(s.step_time);
  for (const NodeTraffic& node : other_nodes) {
    if (node.bytes > s.busiest_bytes) {
      s.busiest_bytes = node.bytes;
      s.busiest_node = node.name;
    }
  }
  if (lead.steps > 0) {
    s.collectives_per_step =
        static_cast<double>(lead.totals.collectives) / static_cast<double>(lead.steps);
  }
  if (rank_steps > 0) {
    s.mean_step.compute_s /= rank_steps;
    s.mean_step.communicate_s /= rank_steps;
    s.mean_step.wait_s /= rank_steps;
  }
  return s;
}

void add_host_links(RunSummary& s, std::vector<HostLink> links) {
  s.host_links = std::move(links);
  s.link_bytes_per_step.reset();
  if (s.host_links.empty() || s.steps <= 0) return;
  std::uint64_t sent = 0;
  for (const HostLink& link : s.host_links) {
    if (!link.ranks.empty()) sent += link.sent;  // the workers' hosts, not the ps shards
  }
  s.link_bytes_per_step = static_cast<double>(sent) / static_cast<double>(s.steps);
}

void write_summary(const std::string& path, const RunSummary& s) {
  nlohmann::json evals = nlohmann::json::array();
  for (const EvalPoint& e : s.evals) {
    evals.push_back({{"step", e.step},
                     {"time_s", e.train_seconds},
                     {"test_loss", e.test_loss},
                     {"test_accuracy", e.test_accuracy}});
  }
  nlohmann::json step_times = nlohmann::json::array();
  for (const StepPercentiles& p : s.step_time) {
    step_times.push_back(
        {{"rank", p.rank}, {"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"max", p.max}});
  }
  nlohmann::json slowest = nullptr;
  if (s.slowest) {
    slowest = {{"rank", s.slowest->rank},
               {"p99_s", s.slowest->p99},
               {"others_median_p99_s", s.slowest->others_median_p99}};
  }
  nlohmann::json j = {
      {"run", s.run},
      {"strategy", s.strategy},
      {"backend", s.backend},
      {"workers", s.workers},
      {"global_batch", s.global_batch},
      {"steps", s.steps},
      {"parameters", s.parameters},
      {"train_seconds", s.train_seconds},
      {"samples_per_s", s.samples_per_s},
      {"final_test_accuracy", s.final_test_accuracy},
      {"final_test_loss", s.final_test_loss},
      {"target_accuracy", s.target_accuracy},
      {"time_to_accuracy_s",
       s.time_to_accuracy_s ? nlohmann::json(*s.time_to_accuracy_s) : nlohmann::json(nullptr)},
      {"busiest_node", {{"name", s.busiest_node}, {"bytes", s.busiest_bytes}}},
      {"mean_step_s",
       {{"compute", s.mean_step.compute_s},
        {"communicate", s.mean_step.communicate_s},
        {"wait", s.mean_step.wait_s}}},
      {"collectives_per_step", s.collectives_per_step},
      {"peak_model_state_bytes", s.peak_model_state_bytes},
      {"peak_model_state_bytes_by_kind",
       {{"params", s.peak_params_bytes},
        {"grads", s.peak_grads_bytes},
        {"optimizer", s.peak_optimizer_bytes}}},
      {"step_time_s", step_times},
      {"slowest_rank", slowest},
      {"dropped_workers", s.dropped_workers},
      {"evals", evals},
      {"provenance", provenance(std::filesystem::path(path).parent_path().string())},
  };
  // Optional keys, absent where they do not apply, so readers of older summaries keep working.
  if (!s.rank_hosts.empty()) {
    nlohmann::json hosts = nlohmann::json::array();
    for (const RankHost& r : s.rank_hosts) hosts.push_back({{"rank", r.rank}, {"host", r.host}});
    j["rank_hosts"] = hosts;
  }
  if (!s.host_links.empty()) {
    nlohmann::json links = nlohmann::json::array();
    for (const HostLink& link : s.host_links) {
      links.push_back({{"name", link.name},
                       {"namespace", link.netns},
                       {"ranks", link.ranks},
                       {"sent", link.sent},
                       {"received", link.received}});
    }
    j["host_link_bytes"] = links;
    if (s.link_bytes_per_step) j["link_bytes_per_step"] = *s.link_bytes_per_step;
  }
  write_file_atomically(path, j.dump(2) + "\n");
}

namespace {

// The slowest rank's p99 step time, in ms, and which rank that is when there are several.
std::string p99_cell(const RunSummary& s) {
  if (s.step_time.empty()) return "-";
  if (!s.slowest) return format("%.2f ms", 1e3 * s.step_time.front().p99);
  return format("%.2f ms", 1e3 * s.slowest->p99) + " (rank " + std::to_string(s.slowest->rank) +
         ")";
}

// "slowest rank of ps-4: rank 3, p99 step 12.60 ms against 9.10 ms (the others' median p99),
// 1.38x": dp's ranks are the replicas of one process.
std::string slowest_line(const RunSummary& s) {
  const SlowestRank& slow = *s.slowest;
  const double others = slow.others_median_p99;
  return "slowest rank of " + s.run + ": " + (s.strategy == "dp" ? "replica " : "rank ") +
         std::to_string(slow.rank) + ", p99 step " + format("%.2f ms", 1e3 * slow.p99) +
         " against " + format("%.2f ms", 1e3 * others) + " (the others' median p99)" +
         (others > 0 ? ", " + format("%.2fx", slow.p99 / others) : std::string()) + "\n";
}

// Peak model-state bytes per rank in MB (10^6 bytes): three significant figures or so for the
// small models, whole MB for the large; "-" where not measured.
std::string model_state_cell(const RunSummary& s) {
  if (s.peak_model_state_bytes == 0) return "-";
  const double mb = static_cast<double>(s.peak_model_state_bytes) / 1e6;
  return format(mb >= 100 ? "%.0f" : mb >= 1 ? "%.1f" : "%.3f", mb);
}

}  // namespace

std::string comparison_table(const std::vector<RunSummary>& runs) {
  std::string out =
      "| run | strategy | backend | workers | global batch | samples/s | vs first | test acc | "
      "time to target | busiest node moved | comm+wait share | p99 step | "
      "peak model-state MB/rank |\n"
      "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  const double base = runs.empty() ? 0 : runs.front().samples_per_s;
  for (const RunSummary& s : runs) {
    const double step = s.mean_step.compute_s + s.mean_step.communicate_s + s.mean_step.wait_s;
    const double comm_share =
        step > 0 ? (s.mean_step.communicate_s + s.mean_step.wait_s) / step : 0;
    out += "| " + s.run + " | " + s.strategy + " | " + s.backend + " | " +
           std::to_string(s.workers) +
           (s.dropped_workers.empty()
                ? ""
                : " (" + std::to_string(s.dropped_workers.size()) + " dropped)") +
           " | " + std::to_string(s.global_batch) + " | " + format("%.0f", s.samples_per_s) +
           " | " + (base > 0 ? format("%.2fx", s.samples_per_s / base) : "-") + " | " +
           // A run without evaluations (a synthetic model) has no accuracy to show.
           (s.evals.empty() ? "-" : format("%.2f%%", 100.0 * s.final_test_accuracy)) + " | " +
           (s.evals.empty()        ? "-"
            : s.time_to_accuracy_s ? format("%.1f s", *s.time_to_accuracy_s)
                                   : "not reached") +
           " | " + human_bytes(s.busiest_bytes) + " (" + s.busiest_node + ") | " +
           format("%.0f%%", 100.0 * comm_share) + " | " + p99_cell(s) + " | " +
           model_state_cell(s) + " |\n";
  }
  std::string lines;
  for (const RunSummary& s : runs) {
    if (s.slowest) lines += slowest_line(s);
    // Its replicas are threads of one process, whose ledger counts them all.
    if (s.strategy == "dp" && s.workers > 1 && s.peak_model_state_bytes > 0) {
      lines += "peak model state of " + s.run + ": the one process's, all " +
               std::to_string(s.workers) + " replicas together\n";
    }
  }
  if (!lines.empty()) out += "\n" + lines;
  return out;
}

}  // namespace gradsync
