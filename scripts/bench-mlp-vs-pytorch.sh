#!/usr/bin/env bash
# Training throughput of the MLP 784-256-256-10: gradsync against PyTorch, measured in one run.
#   CPU (default): batch 64 on one thread, against Debian's python3-torch on OpenBLAS
#                  (torch.set_num_threads(1)).
#   GPU (--device gpu): batch 256, gradsync's CUDA MLP (cuBLAS + its own kernels) against
#                  PyTorch eager on the same GPU, FP32 with TF32 off on both sides. Debian's
#                  python3-torch is CPU-only: set PYTHON to an interpreter whose torch has CUDA,
#                  e.g. PYTHON=~/venv/bin/python.
# The two run in turn (A B A B ...) so that drift in the machine's speed (clocks, thermals,
# neighbours) hits both alike; each pair's ratio is printed and the median ratio last.
#   scripts/bench-mlp-vs-pytorch.sh [--device cpu|gpu] [--gpu N] [--batch B] [--pairs P]
#                                   [--seconds S] [--gradsync BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
gradsync=build/bin/gradsync
device=cpu
gpu=0
batch=
pairs=5
seconds=5
while (($#)); do
  case "$1" in
    --device) device=$2 ;;
    --gpu) gpu=$2 ;;
    --batch) batch=$2 ;;
    --pairs) pairs=$2 ;;
    --seconds) seconds=$2 ;;
    --gradsync) gradsync=$2 ;;
    *) echo "error: unknown argument '$1' (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
  shift 2
done

case "$device" in
  cpu)
    python=/usr/bin/python3
    batch=${batch:-64}
    ours_args=()
    theirs_args=(--threads 1)
    ;;
  gpu)
    python=${PYTHON:-python3}
    batch=${batch:-256}
    ours_args=(--device gpu --gpu "$gpu")
    theirs_args=(--device "cuda:$gpu")
    if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
      echo "error: $python has no PyTorch with CUDA (set PYTHON to one that has)" >&2
      exit 1
    fi
    ;;
  *) echo "error: --device is cpu or gpu, not '$device'" >&2; exit 2 ;;
esac
common=(--hidden 256,256 --batch "$batch" --seconds "$seconds")

samples_per_s() { sed -n 's/.*samples\/s=\([0-9.]*\).*/\1/p' <<<"$1"; }

ratios=()
for ((i = 1; i <= pairs; i++)); do
  ours_line=$("$gradsync" bench mlp "${common[@]}" "${ours_args[@]}")
  theirs_line=$(OMP_NUM_THREADS=1 "$python" bench/torch_mlp.py "${common[@]}" "${theirs_args[@]}")
  ours=$(samples_per_s "$ours_line")
  theirs=$(samples_per_s "$theirs_line")
  # What ran: the BLAS behind PyTorch on CPU, the GPU's name on GPU.
  if [[ $device == cpu ]]; then
    what="pytorch($(sed -n 's/.*blas=\([a-z-]*\).*/\1/p' <<<"$theirs_line"))"
  else
    what="pytorch eager on $(sed -n 's/.*gpu=\(.*\)$/\1/p' <<<"$ours_line")"
  fi
  ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.2f", a / b }')
  ratios+=("$ratio")
  printf 'pair %d: gradsync %10.0f samples/s   %s %10.0f samples/s   ratio %sx\n' \
    "$i" "$ours" "$what" "$theirs" "$ratio"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
echo "median ratio gradsync / pytorch ($device, batch $batch): ${median}x over ${pairs} pairs"
