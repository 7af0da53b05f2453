// The timing loop behind measure_peak_gflops(): twelve independent multiply-add chains of one
// vector type (more than any core's FMA latency x throughput needs), run in rounds until
// `seconds` have passed by the caller's clock (`now`, in seconds: <chrono>'s templates would be
// instantiated here, in a file built for one instruction set). Each gemm_<path>.cpp
// instantiates it with its own vectors and flags; the anonymous namespace keeps every
// instantiation inside its file. Internal to model/kernels/.
#pragma once

namespace gradsync::kernels {
namespace {

// `fma(a, b, c)` = a * b + c on `lanes` floats; counts 2 FLOP per lane.
template <typename Vector, typename Fma>
double fma_peak_gflops(double seconds, double (*now)(), int lanes, Vector a, Vector b, Fma fma) {
  constexpr int kChains = 12;
  constexpr long kRound = 1 << 20;
  Vector acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = b;
  const double start = now();
  long rounds = 0;
  double elapsed = 0;
  do {
    for (long r = 0; r < kRound; ++r) {
#pragma GCC unroll 12
      for (int i = 0; i < kChains; ++i) acc[i] = fma(acc[i], a, b);
    }
    ++rounds;
    elapsed = now() - start;
  } while (elapsed < seconds);
  // The chains' result goes somewhere the compiler must honour, so the loop is not dropped.
  Vector sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = sum + acc[i];
  volatile float sink = 0;
  for (int l = 0; l < lanes; ++l) sink = sink + sum[l];
  return static_cast<double>(rounds) * kRound * kChains * lanes * 2 / elapsed / 1e9;
}

}  // namespace
}  // namespace gradsync::kernels
