// The MLP's matrix products on every candidate this machine has: gradsync's own kernels (each
// path the CPU runs) against Debian's OpenBLAS (serial), BLIS (serial), oneDNN and libxsmm, on
// the exact shapes of a 784-256-256-10 training step at batch 16 to 512:
//   forward      Z = W X            256 x B x 784, 256 x B x 256, 10 x B x 256
//   weight_grad  dW = dZ X^T        256 x 784 x B, 256 x 256 x B, 10 x 256 x B
//   input_grad   dX = W^T dZ        256 x B x 256, 256 x B x 10 (not the first layer's)
//   step         all eight, the products of one whole step
// Each reports GFLOP/s and its share of the measured single-core peak of the instruction set
// it runs on. The libraries are loaded at run time (dlopen; libxsmm is linked where its static
// library was found), so a missing one is skipped with a line saying which package brings it.
//
//   gradsync_gemm_candidates [--isa avx512|avx2] [Google Benchmark flags]
// --isa avx2 holds every candidate to AVX2 on an AVX-512 machine (OpenBLAS's Haswell kernels,
// oneDNN's avx2, libxsmm's hsw, gradsync's avx2 path; Debian's BLIS 0.9 picks its AVX2 zen3
// kernels on every AMD CPU with AVX2 anyway, and each label says what ran): the AVX2 column of the
// comparison, against the AVX2 peak. The libraries read their overrides when they load, so the
// flag must come first, before anything is measured.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/random.h"
#include "model/kernels/cpu_kernels.h"

#if defined(GRADSYNC_HAVE_LIBXSMM)
#include <libxsmm.h>
#endif

namespace {

// C[m x n] = op(A) op(B), column-major, beta = 0; op = transpose where the flag says.
using Sgemm = std::function<void(bool trans_a, bool trans_b, int m, int n, int k, const float* a,
                                 int lda, const float* b, int ldb, float* c, int ldc)>;

struct Candidate {
  std::string name;
  Sgemm gemm;
  gradsync::CpuPath peak_path;  // whose instruction set's peak the share is taken of
  std::string kernels;          // what the candidate says it runs, for the label
};

struct Product {
  bool trans_a, trans_b;
  int m, n, k;
};

// The eight products of a step at batch b, grouped as the benchmark names them.
std::map<std::string, std::vector<Product>> step_products(int b) {
  std::map<std::string, std::vector<Product>> groups;
  groups["forward"] = {
      {false, false, 256, b, 784}, {false, false, 256, b, 256}, {false, false, 10, b, 256}};
  groups["weight_grad"] = {
      {false, true, 256, 784, b}, {false, true, 256, 256, b}, {false, true, 10, 256, b}};
  groups["input_grad"] = {{true, false, 256, b, 256}, {true, false, 256, b, 10}};
  auto& all = groups["step"];
  for (const char* g : {"forward", "weight_grad", "input_grad"}) {
    all.insert(all.end(), groups[g].begin(), groups[g].end());
  }
  return groups;
}

// ---- gradsync's own kernels, each path forced in turn --------------------------------------
Sgemm gradsync_path(gradsync::CpuPath path) {
  return [path, scratch = std::vector<float>(784 * 512)](
             bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
             const float* b, int ldb, float* c, int ldc) mutable {
    // The path's own products, whatever library is installed (those are candidates of their own).
    gradsync::set_cpu_path(path, gradsync::GemmSource::kOwn);
    if (trans_a) {
      // As the MLP does (gemm_tn: W^T into a scratch buffer, then the nn product).
      gradsync::gemm_tn(m, n, k, a, lda, b, ldb, c, ldc, scratch.data());
      return;
    }
    if (trans_b) {
      gradsync::gemm_nt(m, n, k, a, lda, b, ldb, c, ldc);
    } else {
      gradsync::gemm_nn(m, n, k, a, lda, b, ldb, c, ldc);
    }
  };
}

// ---- libraries through dlopen ------------------------------------------------------------
void* open_library(const char* path, const char* package) {
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "skipped: %s (%s; install %s)\n", path, dlerror(), package);
  }
  return handle;
}

template <typename Fn>
Fn symbol(void* handle, const char* name) {
  return reinterpret_cast<Fn>(dlsym(handle, name));
}

// CBLAS, column-major (OpenBLAS).
using CblasSgemm = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                            const float* a, int lda, const float* b, int ldb, float beta, float* c,
                            int ldc);
constexpr int kColMajor = 102, kNoTrans = 111, kTrans = 112;

Sgemm cblas(CblasSgemm fn) {
  return [fn](bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b,
              int ldb, float* c, int ldc) {
    fn(kColMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, m, n, k, 1.f, a, lda, b, ldb, 0.f,
       c, ldc);
  };
}

// BLIS's typed API: strides instead of layouts; trans_t values BLIS_NO_TRANSPOSE = 0,
// BLIS_TRANSPOSE = 8 (blis.h).
using BliSgemm = void (*)(int trans_a, int trans_b, long m, long n, long k, const float* alpha,
                          const float* a, long rsa, long csa, const float* b, long rsb, long csb,
                          const float* beta, float* c, long rsc, long csc);

Sgemm blis(BliSgemm fn) {
  return [fn](bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b,
              int ldb, float* c, int ldc) {
    const float one = 1.f, zero = 0.f;
    fn(ta ? 8 : 0, tb ? 8 : 0, m, n, k, &one, a, 1, lda, b, 1, ldb, &zero, c, 1, ldc);
  };
}

// oneDNN's dnnl_sgemm is row-major: column-major C = op(A) op(B) is row-major
// C^T = op(B)^T op(A)^T, so the operands swap.
using DnnlSgemm = int (*)(char trans_a, char trans_b, long m, long n, long k, float alpha,
                          const float* a, long lda, const float* b, long ldb, float beta, float* c,
                          long ldc);

Sgemm onednn(DnnlSgemm fn) {
  return [fn](bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b,
              int ldb, float* c, int ldc) {
    fn(tb ? 'T' : 'N', ta ? 'T' : 'N', n, m, k, 1.f, b, ldb, a, lda, 0.f, c, ldc);
  };
}

#if defined(GRADSYNC_HAVE_LIBXSMM)
// libxsmm: a JIT kernel per shape, dispatched once and cached; it has no transposed A, so W^T
// goes through a scratch copy, as in gradsync.
Sgemm xsmm() {
  return [cache = std::map<std::vector<int>, libxsmm_smmfunction>(),
          scratch = std::vector<float>(784 * 512)](bool ta, bool tb, int m, int n, int k,
                                                   const float* a, int lda, const float* b, int ldb,
                                                   float* c, int ldc) mutable {
    if (ta) {
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < k; ++j) scratch[std::size_t(j) * m + i] = a[std::size_t(i) * lda + j];
      }
      a = scratch.data();
      lda = m;
    }
    const std::vector<int> key = {tb, m, n, k, lda, ldb, ldc};
    auto it = cache.find(key);
    if (it == cache.end()) {
      const float alpha = 1.f, beta = 0.f;
      const int flags = tb ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE;
      const libxsmm_blasint lm = m, ln = n, lk = k, la = lda, lb = ldb, lc = ldc;
      it = cache
               .emplace(key, libxsmm_smmdispatch(lm, ln, lk, &la, &lb, &lc, &alpha, &beta, &flags,
                                                 nullptr))
               .first;
    }
    if (it->second == nullptr) {
      throw std::runtime_error("libxsmm has no kernel for " + std::to_string(m) + "x" +
                               std::to_string(n) + "x" + std::to_string(k) +
                               (tb ? " (B transposed)" : ""));
    }
    it->second(a, b, c);
  };
}
#endif

// ---- the measurement ----------------------------------------------------------------------
std::map<gradsync::CpuPath, double>& peaks() {
  static std::map<gradsync::CpuPath, double> measured;
  return measured;
}

void run_products(benchmark::State& state, const Candidate& candidate,
                  const std::vector<Product>& products) {
  // Operands sized for the largest product, random, and the same for every candidate.
  static const std::vector<float> a = [] {
    std::vector<float> v(784 * 512);
    gradsync::SplitMix64 rng(1);
    for (float& x : v) x = static_cast<float>(rng.normal());
    return v;
  }();
  static const std::vector<float> b = a;
  std::vector<float> c(784 * 512);
  double flop = 0;
  for (const Product& p : products) flop += 2.0 * p.m * p.n * p.k;
  try {
    for (auto _ : state) {
      for (const Product& p : products) {
        const int lda = p.trans_a ? p.k : p.m, ldb = p.trans_b ? p.n : p.k;
        candidate.gemm(p.trans_a, p.trans_b, p.m, p.n, p.k, a.data(), lda, b.data(), ldb, c.data(),
                       p.m);
      }
      benchmark::DoNotOptimize(c.data());
      benchmark::ClobberMemory();
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  const double gflops = flop * static_cast<double>(state.iterations()) / 1e9;
  state.counters["GFLOP/s"] = benchmark::Counter(gflops, benchmark::Counter::kIsRate);
  state.counters["share"] =
      benchmark::Counter(gflops / peaks()[candidate.peak_path], benchmark::Counter::kIsRate);
  state.SetLabel(candidate.kernels);
}

void set_isa_overrides(const std::string& isa) {
  // One thread everywhere: the step runs on one core (oneDNN and OpenBLAS's threaded builds
  // would otherwise take every core; the serial builds ignore it).
  setenv("OMP_NUM_THREADS", "1", 1);
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  setenv("BLIS_NUM_THREADS", "1", 1);
  if (isa == "avx2") {
    // Each library's documented override, read when it loads.
    setenv("OPENBLAS_CORETYPE", "Haswell", 1);
    setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
    setenv("LIBXSMM_TARGET", "hsw", 1);
  } else if (isa != "avx512") {
    std::fprintf(stderr, "error: --isa is avx512 or avx2, not '%s'\n", isa.c_str());
    std::exit(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string isa = gradsync::cpu_runs(gradsync::CpuPath::kAvx512) ? "avx512" : "avx2";
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--isa") == 0 && i + 1 < argc) {
      isa = argv[++i];
    } else {
      rest.push_back(argv[i]);
    }
  }
  set_isa_overrides(isa);
  const gradsync::CpuPath library_path =
      isa == "avx512" ? gradsync::CpuPath::kAvx512 : gradsync::CpuPath::kAvx2;
  if (!gradsync::cpu_runs(library_path)) {
    std::fprintf(stderr, "error: --isa %s: this CPU lacks it\n", isa.c_str());
    return 2;
  }

  std::vector<Candidate> candidates;
  for (const auto path :
       {gradsync::CpuPath::kAvx512, gradsync::CpuPath::kAvx2, gradsync::CpuPath::kPortable}) {
    if (!gradsync::cpu_runs(path)) continue;
    if (isa == "avx2" && path == gradsync::CpuPath::kAvx512) continue;
    candidates.push_back({std::string("gradsync-") + gradsync::cpu_path_name(path),
                          gradsync_path(path), path, gradsync::cpu_path_isa(path)});
  }
  if (void* h = open_library("/usr/lib/x86_64-linux-gnu/openblas-serial/libopenblas.so.0",
                             "libopenblas0-serial")) {
    auto core = symbol<const char* (*)()>(h, "openblas_get_corename");
    candidates.push_back({"openblas", cblas(symbol<CblasSgemm>(h, "cblas_sgemm")), library_path,
                          core != nullptr ? core() : "?"});
  }
  if (void* h =
          open_library("/usr/lib/x86_64-linux-gnu/blis-serial/libblis.so.4", "libblis4-serial")) {
    auto arch_id = symbol<int (*)()>(h, "bli_arch_query_id");
    auto arch_name = symbol<const char* (*)(int)>(h, "bli_arch_string");
    candidates.push_back({"blis", blis(symbol<BliSgemm>(h, "bli_sgemm")), library_path,
                          arch_id && arch_name ? arch_name(arch_id()) : "?"});
  }
  if (void* h = open_library("libdnnl.so.2", "libdnnl2")) {
    // dnnl_cpu_isa_t's value (dnnl_types.h): 0xe7 avx512_core_bf16, 0x7 avx2, ...
    auto isa_now = symbol<int (*)()>(h, "dnnl_get_effective_cpu_isa");
    char label[32];
    std::snprintf(label, sizeof label, "isa 0x%x", isa_now != nullptr ? isa_now() : 0);
    candidates.push_back(
        {"onednn", onednn(symbol<DnnlSgemm>(h, "dnnl_sgemm")), library_path, label});
  }
#if defined(GRADSYNC_HAVE_LIBXSMM)
  libxsmm_init();
  candidates.push_back({"libxsmm", xsmm(), library_path, libxsmm_get_target_arch()});
#else
  std::fprintf(stderr, "skipped: libxsmm (not found when this was built; install libxsmm-dev)\n");
#endif

  for (const Candidate& c : candidates) {
    if (peaks().count(c.peak_path) == 0) {
      peaks()[c.peak_path] = gradsync::measure_peak_gflops(c.peak_path, 0.5);
    }
  }
  for (const int batch : {16, 32, 64, 128, 256, 512}) {
    for (const auto& [group, products] : step_products(batch)) {
      for (const Candidate& c : candidates) {
        const std::string name = group + "/B=" + std::to_string(batch) + "/" + c.name;
        benchmark::RegisterBenchmark(name.c_str(), [c, products = products](benchmark::State& s) {
          run_products(s, c, products);
        })->MinTime(0.2);
      }
    }
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
