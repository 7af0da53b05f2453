#include "worker/server_process.h"

#include <iostream>

#include "common/error.h"
#include "launch/inherited_socket.h"
#include "model/data_loader.h"
#include "server/key_range.h"
#include "server/ps_shard.h"
#include "worker/checkpoints.h"
#include "worker/clock_origin.h"
#include "worker/model_factory.h"
#include "worker/rank_outputs.h"
#include "worker/run_plan.h"
#include "worker/trace_writer.h"

namespace gradsync {
namespace {

PsShardOptions::Mode parse_mode(const std::string& mode) {
  if (mode == "sync") return PsShardOptions::Mode::kSync;
  if (mode == "async") return PsShardOptions::Mode::kAsync;
  return PsShardOptions::Mode::kSsp;  // the preset loader admits no other value
}

// checkpoint.*: where and when this shard writes its range, and the range's state to resume from.
void add_checkpointing(PsShardOptions& options, const Config& config, const RunPlan& plan,
                       const std::string& run_dir) {
  validate_checkpointing(config);
  options.checkpoint_every = config.checkpoint.every;
  options.checkpoint_last_step = plan.steps;
  options.checkpoint_root = checkpoint_root(config, run_dir);
  options.checkpoint_description = model_description(config, plan.widths);
  options.checkpoint_settings = training_settings(config);
  if (config.checkpoint.resume.empty()) return;
  const KeyRange range = balanced_ranges(options.model_size, options.shards)[options.shard];
  TrainingState state = load_training_state(
      resolve_checkpoint(config.checkpoint.resume, config.name), options.checkpoint_description,
      options.model_size, range.begin, range.end);
  options.resume = PsShardOptions::Start{state.step, state.optimizer_steps, std::move(state.params),
                                         std::move(state.momentum)};
}

}  // namespace

void run_server_process(const Config& config, const std::string& run_dir, int shard, int port,
                        std::uint64_t run_id, const std::string& bind,
                        const std::function<void(const std::string&)>& on_listening) {
  if (shard >= config.ps.servers) {
    throw ConfigError(
        "command line", "--shard",
        std::to_string(shard) + " is not below ps.servers = " + std::to_string(config.ps.servers));
  }
  // The shard checks every worker's model size against its own idea of the model, which the
  // configuration and the data's shape determine.
  const RunPlan plan = plan_run(config, load_data(config.data, config.train.seed));

  PsShardOptions options;
  options.shard = shard;
  options.shards = config.ps.servers;
  options.world_size = config.workers;
  options.model_size = static_cast<std::uint64_t>(model_parameters(config, plan.widths));
  options.bind_host = bind.empty() ? config.ps.bind : bind;
  options.port = port;
  options.run_id = run_id;
  // gradsync run binds the shard's socket itself and hands it down (launch/inherited_socket.h).
  options.listen_fd = inherited_listening_socket(kShardFdEnv, port);
  options.mode = parse_mode(config.ps.mode);
  // The bound means something only to ssp; the shard refuses it elsewhere.
  options.staleness = options.mode == PsShardOptions::Mode::kSsp ? config.ps.staleness : 0;
  // sync applies one update a step; async and ssp apply each worker's push as its own.
  options.sgd = sgd_options(config, options.mode == PsShardOptions::Mode::kSync
                                        ? plan.steps
                                        : plan.steps * config.workers);
  options.timeout = comm_timeout(config);
  options.continue_without_dead_workers = config.ps.continue_without_dead_workers;
  if (!config.ps.curve_keys.empty()) options.curve = read_curve_keys(config.ps.curve_keys);
  options.link = make_link(emulated_link_gbps(config));
  // Workers of this host come through ipc (server/local_endpoint.h); the emulated link, paced
  // in this process, applies there all the same.
  options.bind_ipc = true;
  add_checkpointing(options, config, plan, run_dir);
  // Receive and apply spans per worker and step, and the replies, for the run's trace.json:
  // about 2N + 1 a step, over the ranks' first output.trace_steps steps.
  // Under gradsync run the launcher's clock origin is every rank's time zero, and the shard's;
  // otherwise the shard takes the moment its workers' init ends (TraceSink::set_origin).
  const std::optional<Clock::time_point> shared = launcher_origin();
  TraceWriter trace(shared.value_or(Clock::now()),
                    plan.trace_spans_per_rank * (config.workers + 1));
  struct KeepOrigin final : TraceSink {
    TraceWriter& trace;
    explicit KeepOrigin(TraceWriter& t) : trace(t) {}
    void add_span(int owner, TraceTrack track, const TraceSpan& span) override {
      trace.add_span(owner, track, span);
    }
    void set_origin(Clock::time_point) override {}
  } keep_origin(trace);
  if (config.output.trace_steps > 0) {
    options.trace = shared ? static_cast<TraceSink*>(&keep_origin) : &trace;
  }
  // After a failure too: the steps before it are worth seeing; the failure is what gets
  // reported, so a trace that cannot be written must not replace it.
  struct WriteTraceOnFailure {
    const TraceWriter& trace;
    std::string path;
    bool written = false;
    ~WriteTraceOnFailure() {
      try {
        if (!written) trace.write(path);
      } catch (const std::exception&) {
      }
    }
  } write_trace{trace, shard_trace_path(run_dir, shard)};

  PsShard server(options);
  if (on_listening) {
    on_listening(server.endpoint());
  } else {
    std::cout << "endpoint " << server.endpoint() << std::endl;
  }
  server.serve();
  // Before the traffic file: rank 0, folding a run no gradsync launcher supervises, merges the
  // traces once every shard's traffic file is there.
  trace.write(write_trace.path);
  write_trace.written = true;
  const PsShardTraffic traffic = server.traffic();
  write_server_traffic(server_result_path(run_dir, shard), traffic.bytes_sent,
                       traffic.bytes_received);
}

}  // namespace gradsync
