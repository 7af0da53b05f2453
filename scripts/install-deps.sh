#!/usr/bin/env bash
# Installs the Debian packages gradsync needs, and only those that are missing.
#   scripts/install-deps.sh          build, test and demo dependencies (the launchers, Gloo and
#                                    Open MPI included)
#   scripts/install-deps.sh --bench  also the peers the benchmarks compare against
#                                    (BLIS and libxsmm for gradsync_gemm_candidates, beside
#                                    OpenBLAS and oneDNN)
#   scripts/install-deps.sh --fuzz   also clang, libFuzzer and llvm-symbolizer for `make fuzz`
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libzmq3-dev cppzmq-dev libeigen3-dev doctest-dev libbenchmark-dev
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
  # comm.backend gloo and mpi (found at configure time; without one the build lacks that backend)
  libgloo-dev libopenmpi-dev
  dataset-fashion-mnist python3 python3-matplotlib python3-numpy
  # The launchers the tests start gradsync under: torchrun (python3-torch), mpirun, and a real
  # one-host Slurm (scripts/slurm-one-host.sh: slurmctld, slurmd, munge).
  python3-torch openmpi-bin slurm-wlm munge
  # The libraries the CPU step takes its products from where they beat gradsync's own kernels
  # (model/kernels/, loaded at run time): oneDNN on AVX-512, OpenBLAS (serial) on AVX2.
  libdnnl2 libopenblas0-serial
)
for flag in "$@"; do
  case "$flag" in
    # Serial builds, as a one-thread step is measured; libxsmm is a static library, linked
    # when the build is configured (so install before configuring).
    --bench) packages+=(libblis4-serial libxsmm-dev) ;;
    # libFuzzer's runtime is in libclang-rt-14-dev, which clang does not pull in; llvm-14 has the
    # symbolizer that turns sanitizer stacks into file:line.
    --fuzz) packages+=(clang libclang-rt-14-dev llvm-14) ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
