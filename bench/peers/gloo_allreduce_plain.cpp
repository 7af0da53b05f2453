// The plain Gloo peer of `gradsync bench allreduce --backend gloo`: Gloo's ring allreduce over
// its own TCP transport, called directly, with no gradsync in the process. It prints the rows
// gradsync's bench prints (backend "gloo-plain"), with the same data, check and timing rules,
// so that each row pairs with the gloo row of the same size (docs/benchmarks.md).
//
//   gloo_allreduce_plain -n 4 -b 4K -e 64M [-f 2] [-w 5] [--iters 0] [--seconds 0.3]
//                        [--algorithm ring|halving_doubling] [--pairs async|sync|busy_poll]
//
// --algorithm halving_doubling is gloo::AllreduceHalvingDoubling (out of place: the input copied
// to the output first, as Gloo's older algorithms reduce in place). --pairs sync (busy_poll) runs
// it on a second full mesh whose pairs are in Gloo's sync mode (setSync; busy_poll spinning), in
// pieces of at most net.core.wmem_max bytes: a sync pair writes before it reads, and two ranks
// sending each other more than the kernel buffers would wait on each other until the timeout.
// The barrier and the reductions of the timings stay on the first mesh (async pairs).
//
// Ranks are processes: this program forks them (before any Gloo object exists, so no thread is
// forked) and they meet through Gloo's own gloo::rendezvous::FileStore in a fresh temporary
// folder. Rank 0 prints; the parent waits for every rank, stops the others when one fails, and
// exits non-zero when a rank failed or any element came out wrong.
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/barrier.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace {

struct Options {
  std::size_t min_bytes = 4096, max_bytes = 64 << 20;
  int factor = 2, ranks = 2, warmup = 5, iters = 0;
  double seconds = 0.3;            // with iters 0: timed work per form, as gradsync's --seconds
  std::string algorithm = "ring";  // ring | halving_doubling
  std::string pairs = "async";     // async | sync | busy_poll
};

constexpr std::chrono::seconds kTimeout{60};
constexpr std::size_t kPeriod = 32749;  // the data's period, as gradsync's plug-in

std::size_t parse_size(const char* text) {
  char* end = nullptr;
  std::size_t value = std::strtoull(text, &end, 10);
  const std::string unit = end;
  if (unit == "K" || unit == "k") value <<= 10;
  if (unit == "M" || unit == "m") value <<= 20;
  if (unit == "G" || unit == "g") value <<= 30;
  return value;
}

Options parse(int argc, char** argv) {
  Options o;
  if (argc % 2 == 0) throw std::runtime_error(std::string("no value after ") + argv[argc - 1]);
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "-b")
      o.min_bytes = parse_size(value);
    else if (flag == "-e")
      o.max_bytes = parse_size(value);
    else if (flag == "-f")
      o.factor = std::atoi(value);
    else if (flag == "-n")
      o.ranks = std::atoi(value);
    else if (flag == "-w")
      o.warmup = std::atoi(value);
    else if (flag == "--iters")
      o.iters = std::atoi(value);
    else if (flag == "--seconds")
      o.seconds = std::atof(value);
    else if (flag == "--algorithm")
      o.algorithm = value;
    else if (flag == "--pairs")
      o.pairs = value;
    else
      throw std::runtime_error("unknown option " + flag +
                               " (-b -e -f -n -w --iters --seconds --algorithm --pairs)");
  }
  if (o.algorithm != "ring" && o.algorithm != "halving_doubling") {
    throw std::runtime_error("--algorithm " + o.algorithm + ": ring or halving_doubling");
  }
  if (o.pairs != "async" && o.pairs != "sync" && o.pairs != "busy_poll") {
    throw std::runtime_error("--pairs " + o.pairs + ": async, sync or busy_poll");
  }
  if (o.pairs != "async" && o.algorithm != "halving_doubling") {
    throw std::runtime_error("--pairs " + o.pairs + " needs --algorithm halving_doubling");
  }
  if (o.ranks < 2 || o.factor < 2 || o.min_bytes < 4 || o.max_bytes < o.min_bytes ||
      !(o.seconds > 0)) {
    throw std::runtime_error(
        "needs -n >= 2 (Gloo's ring needs a peer), -f >= 2, 4 <= -b <= -e, --seconds > 0");
  }
  return o;
}

// gloo::sum and gloo::max have overloads; these pick the (out, a, b, n) ones.
void sum_floats(void* c, const void* a, const void* b, std::size_t n) {
  gloo::sum<float>(c, a, b, n);
}
void max_doubles(void* c, const void* a, const void* b, std::size_t n) {
  gloo::max<double>(c, a, b, n);
}
void sum_doubles(void* c, const void* a, const void* b, std::size_t n) {
  gloo::sum<double>(c, a, b, n);
}

// The most bytes a blocking send hands the kernel however little the peer reads.
std::size_t send_buffer_limit() {
  std::ifstream file("/proc/sys/net/core/wmem_max");
  std::size_t bytes = 0;
  if (!(file >> bytes) || bytes == 0) bytes = 212992;
  return std::min<std::size_t>(bytes, std::size_t(32) << 20);  // Gloo's own send-buffer cap
}

class Rank {
 public:
  Rank(int rank, int size, const std::string& folder, const Options& o)
      : rank_(rank), size_(size), halving_doubling_(o.algorithm == "halving_doubling") {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    attr.ai_family = AF_INET;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(folder);
    context_ = connect(store, device);
    if (o.pairs != "async") {
      gloo::rendezvous::PrefixStore sync_store("sync", store);
      sync_context_ = connect(sync_store, device);
      for (int r = 0; r < size; ++r) {
        if (r != rank) sync_context_->getPair(r)->setSync(true, o.pairs == "busy_poll");
      }
      piece_ = std::max<std::size_t>(send_buffer_limit() / sizeof(float), 1024);
    }
  }

  void barrier() {
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag_++);
    opts.setTimeout(kTimeout);
    gloo::barrier(opts);
  }

  // Out of place Gloo reads `in` and writes `out`; in place (no input set) it reduces `out`.
  void allreduce(std::vector<float>& in, std::vector<float>& out, bool in_place) {
    if (halving_doubling_) {
      if (!in_place) std::copy(in.begin(), in.end(), out.begin());
      const auto& context = sync_context_ ? sync_context_ : context_;
      const std::size_t piece = piece_ > 0 ? piece_ : out.size();
      for (std::size_t at = 0; at < out.size(); at += piece) {
        std::vector<float*> pointers = {out.data() + at};
        gloo::AllreduceHalvingDoubling<float> algorithm(context, pointers,
                                                        int(std::min(piece, out.size() - at)));
        algorithm.run();
      }
      return;
    }
    gloo::AllreduceOptions opts(context_);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    if (!in_place) opts.setInput(in.data(), in.size());
    opts.setOutput(out.data(), out.size());
    opts.setReduceFunction(sum_floats);
    opts.setTag(tag_++);
    opts.setTimeout(kTimeout);
    gloo::allreduce(opts);
  }

  // Combines one number per rank: how rank 0 learns the slowest time and the total #wrong.
  double reduce(double value, void (*fn)(void*, const void*, const void*, std::size_t)) {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(&value, 1);
    opts.setReduceFunction(fn);
    opts.setTag(tag_++);
    opts.setTimeout(kTimeout);
    gloo::allreduce(opts);
    return value;
  }

  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  std::shared_ptr<gloo::Context> connect(gloo::rendezvous::Store& store,
                                         std::shared_ptr<gloo::transport::Device>& device) {
    auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    context->setTimeout(kTimeout);
    context->connectFullMesh(store, device);
    return context;
  }

  int rank_, size_;
  bool halving_doubling_;
  std::shared_ptr<gloo::Context> context_;
  std::shared_ptr<gloo::Context> sync_context_;  // --pairs sync or busy_poll
  std::size_t piece_ = 0;                        // floats per call on sync pairs; 0: whole
  std::uint32_t tag_ = 1;
};

// Rank r holds (r + 1) + p(i): the sum is n(n+1)/2 + n p(i), exact in float.
void init(int rank, std::size_t count, bool in_place, std::vector<float>& in,
          std::vector<float>& out) {
  std::vector<float>& data = in_place ? out : in;
  data.resize(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = float(rank + 1) + float(i % kPeriod);
  if (!in_place) out.assign(count, -1.0f);
}

struct Form {
  double seconds;
  double wrong;
};

Form measure(Rank& self, const Options& o, std::size_t count, bool in_place) {
  std::vector<float> in, out;
  init(self.rank(), count, in_place, in, out);
  using Clock = std::chrono::steady_clock;
  int iters = o.iters;
  if (iters == 0) {
    // Enough for ~o.seconds, from the slowest rank's median warm-up call, each timed, at least
    // three of them (gradsync's rule, bench/collective_sweep.cpp).
    std::vector<double> calls;
    for (int k = 0; k < std::max(o.warmup, 3); ++k) {
      const auto start = Clock::now();
      self.allreduce(in, out, in_place);
      calls.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    std::nth_element(calls.begin(), calls.begin() + std::ptrdiff_t(calls.size() / 2), calls.end());
    const double slowest = std::max(1e-7, self.reduce(calls[calls.size() / 2], max_doubles));
    iters = std::clamp(int(std::ceil(o.seconds / slowest)), 5, 1000);
  } else {
    for (int k = 0; k < o.warmup; ++k) self.allreduce(in, out, in_place);
  }
  self.barrier();
  const auto start = Clock::now();
  for (int k = 0; k < iters; ++k) self.allreduce(in, out, in_place);
  const double mean = std::chrono::duration<double>(Clock::now() - start).count() / iters;
  init(self.rank(), count, in_place, in, out);
  self.allreduce(in, out, in_place);
  const int n = self.size();
  double wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    wrong += out[i] != float(n * (n + 1) / 2) + float(n) * float(i % kPeriod);
  }
  return {self.reduce(mean, max_doubles), self.reduce(wrong, sum_doubles)};
}

// nccl-tests' getFloatStr.
std::string fit(double value, int width) {
  char text[64];
  for (const char* format : {"%*.2f", "%*.1f", "%*.0f"}) {
    if (std::snprintf(text, sizeof text, format, width, value) <= width) return text;
  }
  std::snprintf(text, sizeof text, width >= 7 ? "%*.1e" : "%*.0e", width, value);
  return text;
}

int run_rank(int rank, const Options& o, const std::string& folder) {
  Rank self(rank, o.ranks, folder, o);
  const double factor = 2.0 * (o.ranks - 1) / o.ranks;
  if (rank == 0) {
    std::printf("# gloo_allreduce_plain\n# Collective test starting: gloo_allreduce_plain\n");
    std::printf(
        "# nRanks %d (processes forked by gloo_allreduce_plain) minBytes %zu maxBytes %zu "
        "step: %d(factor) warmup iters: %d iters: ",
        o.ranks, o.min_bytes, o.max_bytes, o.factor, o.warmup);
    if (o.iters > 0) {
      std::printf("%d validation: 1\n", o.iters);
    } else {
      std::printf("0 (auto, ~%g s per form) validation: 1\n", o.seconds);
    }
    std::printf(
        "# allreduce; type float; time: max over ranks of the mean per-iteration time; "
        "busbw = algbw * %.4g\n#\n# Using backends\n",
        factor);
    const std::string allreduce =
        o.algorithm == "ring" ? "gloo::allreduce ring" : "gloo::AllreduceHalvingDoubling";
    const std::string pairs = o.pairs == "async"
                                  ? ""
                                  : " on " + o.pairs +
                                        " pairs (in pieces of at most net.core.wmem_max "
                                        "bytes)";
    std::printf(
        "#  %-10s Gloo %d.%d.%d %s%s called directly (no gradsync), "
        "Gloo's TCP transport, 127.0.0.1, rendezvous gloo::rendezvous::FileStore\n#\n",
        "gloo-plain", GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH, allreduce.c_str(),
        pairs.c_str());
    std::printf(
        "# %8s  %12s  %12s  %8s  %6s  %6s           out-of-place                       "
        "in-place          \n",
        "", "", "", "", "", "");
    std::printf("# %8s  %12s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n",
                "backend", "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
                "#wrong", "time", "algbw", "busbw", "#wrong");
    std::printf("# %8s  %12s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "",
                "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                "(GB/s)", "");
    std::fflush(stdout);
  }
  double wrong_total = 0, busbw_sum = 0;
  int forms = 0;
  for (std::size_t bytes = o.min_bytes;; bytes *= std::size_t(o.factor)) {
    const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float));
    std::string line;
    char cells[256];
    std::snprintf(cells, sizeof cells, "%10s  %12zu  %12zu  %8s  %6s  %6i", "gloo-plain",
                  count * sizeof(float), count, "float", "sum", -1);
    line = cells;
    for (bool in_place : {false, true}) {
      const Form form = measure(self, o, count, in_place);
      const double algbw = double(count * sizeof(float)) / form.seconds / 1e9;
      std::snprintf(cells, sizeof cells, "  %7s  %6s  %6s  %6g", fit(form.seconds * 1e6, 7).c_str(),
                    fit(algbw, 6).c_str(), fit(algbw * factor, 6).c_str(), form.wrong);
      line += cells;
      wrong_total += form.wrong;
      busbw_sum += algbw * factor;
      ++forms;
    }
    if (rank == 0) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
    if (bytes > o.max_bytes / std::size_t(o.factor)) break;
  }
  if (rank == 0) {
    std::printf("# %-20s : %.0f %s\n", "Out of bounds values", wrong_total,
                wrong_total > 0 ? "FAILED" : "OK");
    std::printf("# %-20s : %g \n#\n# Collective test concluded: gloo_allreduce_plain\n#\n",
                "Avg bus bandwidth", busbw_sum / forms);
    std::fflush(stdout);  // the rank ends with _Exit, which flushes nothing
  }
  self.barrier();  // no rank closes its connections under a peer still in the last collective
  return wrong_total > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_allreduce_plain: %s\n", e.what());
    return 2;
  }
  char folder[] = "/tmp/gloo_allreduce_plain.XXXXXX";
  if (::mkdtemp(folder) == nullptr) {
    std::perror("gloo_allreduce_plain: mkdtemp");
    return 1;
  }
  std::fflush(stdout);
  std::vector<pid_t> children;
  for (int rank = 0; rank < options.ranks; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // die with the driver, whatever ends it
      try {
        std::_Exit(run_rank(rank, options, folder));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "gloo_allreduce_plain: rank %d: %s\n", rank, e.what());
        std::_Exit(1);
      }
    }
    children.push_back(pid);
  }
  // The first rank to fail stops the others: they would wait for it until Gloo's timeout.
  int status = 0, failed = 0;
  for (std::size_t left = children.size(); left > 0; --left) {
    const pid_t pid = ::wait(&status);
    if (pid > 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0) && failed++ == 0) {
      for (pid_t child : children) ::kill(child, SIGTERM);
    }
  }
  std::filesystem::remove_all(folder);
  return failed > 0 ? 1 : 0;
}
