// Runs a test body once per CPU kernel path this machine runs (model/kernels/cpu_kernels.h),
// each forced in turn, and says which paths it skips; the path in force before is restored.
// on_every_gemm runs it once more per path with the path's own products, where a library takes
// them by default (what the products ran on is in the captured `gemm`).
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "model/kernels/cpu_kernels.h"

namespace gradsync::testing {

template <typename Body>
void on_every_cpu_path(Body body) {
  const CpuPath before = cpu_path();
  for (const CpuPath path : {CpuPath::kAvx512, CpuPath::kAvx2, CpuPath::kPortable}) {
    if (!cpu_runs(path)) {
      MESSAGE("kernel path " << cpu_path_name(path) << " skipped: this CPU lacks it");
      continue;
    }
    CAPTURE(cpu_path_name(path));
    set_cpu_path(path);
    body();
  }
  set_cpu_path(before, gemm_source_for(std::getenv("GRADSYNC_GEMM")));
}

template <typename Body>
void on_every_gemm(Body body) {
  on_every_cpu_path([&] {
    const CpuPath path = cpu_path();
    for (const GemmSource source : {GemmSource::kLibrary, GemmSource::kOwn}) {
      set_cpu_path(path, source);
      const std::string gemm = gemm_name();
      CAPTURE(gemm);
      body();
      if (gemm == "own" || gemm == "eigen") break;  // no library here: own was just run
    }
    set_cpu_path(path, gemm_source_for(std::getenv("GRADSYNC_GEMM")));
  });
}

}  // namespace gradsync::testing
