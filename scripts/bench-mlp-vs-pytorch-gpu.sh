#!/usr/bin/env bash
# Training throughput of the MLP 784-256-256-10 at batch 256 on one GPU: gradsync's CUDA MLP
# (cuBLAS + its own kernels) against PyTorch eager on the same GPU (FP32, TF32 off on both
# sides), measured in one run. As in bench-mlp-vs-pytorch.sh the two run in turn (A B A B ...)
# so that drift (clocks, thermals) hits both alike; each pair's ratio is printed, the median
# last. Needs a PyTorch with CUDA (Debian's python3-torch is CPU-only): set PYTHON to the
# interpreter that has it, e.g. PYTHON=~/venv/bin/python.
#   scripts/bench-mlp-vs-pytorch-gpu.sh [GRADSYNC_BINARY] [PAIRS] [SECONDS] [BATCH] [GPU]
set -euo pipefail
cd "$(dirname "$0")/.."
gradsync=${1:-build/bin/gradsync}
pairs=${2:-5}
seconds=${3:-5}
batch=${4:-256}
gpu=${5:-0}
python=${PYTHON:-python3}
common=(--hidden 256,256 --batch "$batch" --seconds "$seconds")

if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "error: $python has no PyTorch with CUDA (set PYTHON to one that has)" >&2
  exit 1
fi

ratios=()
for ((i = 1; i <= pairs; i++)); do
  ours_line=$("$gradsync" bench mlp "${common[@]}" --device gpu --gpu "$gpu")
  ours=$(sed -n 's/.*samples\/s=\([0-9.]*\).*/\1/p' <<<"$ours_line")
  theirs_line=$("$python" experiments/bench/torch_mlp.py "${common[@]}" --device "cuda:$gpu")
  theirs=$(sed -n 's/.*samples\/s=\([0-9.]*\).*/\1/p' <<<"$theirs_line")
  name=$(sed -n 's/.*gpu=\(.*\)$/\1/p' <<<"$ours_line")
  ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.2f", a / b }')
  ratios+=("$ratio")
  printf 'pair %d: gradsync %10.0f samples/s   pytorch eager %10.0f samples/s   ratio %sx  (%s)\n' \
    "$i" "$ours" "$theirs" "$ratio" "$name"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
echo "median ratio gradsync / pytorch on GPU $gpu (batch $batch): ${median}x over ${pairs} pairs"
