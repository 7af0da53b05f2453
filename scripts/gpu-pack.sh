#!/usr/bin/env bash
# Packs a GPU build of gradsync for a GPU machine that lacks gradsync's Debian packages (and
# cannot install them), for scripts/gpu-check.sh --from PACK:
#
#   scripts/gpu-pack.sh PACK [--arch 90]    on a machine with the CUDA toolkit (no GPU needed)
#
# PACK/bin      gradsync and its unit tests, built for any x86-64 with AVX2 (not -march=native:
#               the GPU machine's processor is another) and the given CUDA architectures
# PACK/lib      the shared libraries they load that are not glibc's or the CUDA toolkit's
#               (ZeroMQ, yaml-cpp, Gloo, ... and the C++ runtime), from this machine
# PACK/fashion-mnist  Debian's dataset-fashion-mnist files, when installed here
# PACK/BUILD    what was built: commit, compiler, CUDA, architectures
# cuBLAS and NCCL are not packed (hundreds of MB): gpu-check.sh finds the GPU machine's own.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
[[ $# -ge 1 ]] || { echo "usage: scripts/gpu-pack.sh PACK [--arch 90]" >&2; exit 2; }
pack=$1
shift
arch=90
while [[ $# -gt 0 ]]; do
  case "$1" in
    --arch) arch=$2; shift 2 ;;
    *) echo "gpu-pack: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
build=$repo/build-gpu-pack

cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGRADSYNC_CUDA=ON -DGRADSYNC_NCCL=ON \
  -DGRADSYNC_NATIVE=OFF -DCMAKE_CXX_FLAGS="-march=x86-64-v3" \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DGRADSYNC_INTEGRATION_TESTS=OFF >"$build.configure.log"
cmake --build "$build" -j"$(nproc)" --target gradsync gradsync_unit_tests

rm -rf "$pack"
mkdir -p "$pack/bin" "$pack/lib"
cp "$build/bin/gradsync" "$build/bin/gradsync_unit_tests" "$pack/bin/"
# Every library the binaries load, except glibc's own (the GPU machine's must be used) and the
# CUDA toolkit's and driver's (its own, matching its driver).
for binary in "$pack"/bin/*; do
  ldd "$binary" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libresolv.so*) ;;
    libcuda.so*|libcublas*|libnccl*|libnvidia*) ;;
    *) cp -L "$lib" "$pack/lib/" ;;
  esac
done
if [[ -d /usr/share/datasets/fashion-mnist ]]; then
  cp -r /usr/share/datasets/fashion-mnist "$pack/fashion-mnist"
fi
nvcc_version=$("$(grep -m 1 '^CMAKE_CUDA_COMPILER:' "$build/CMakeCache.txt" | cut -d= -f2)" --version |
  grep -o 'release [0-9.]*')
echo "commit $(git -C "$repo" rev-parse --short HEAD)$(git -C "$repo" diff --quiet || echo +changes)," \
  "$(c++ --version | head -n 1), CUDA $nvcc_version, sm $arch" >"$pack/BUILD"
du -sh "$pack"/* | sed 's/^/gpu-pack: /'
