#!/usr/bin/env bash
# Training throughput of the MLP 784-256-256-10 at batch 64 on one thread: gradsync against
# PyTorch (Debian's python3-torch on OpenBLAS, torch.set_num_threads(1)), measured in one run.
# The two run in turn (A B A B ...) so that drift in the machine's speed hits both alike; each
# pair's ratio is printed and the median ratio last.
#   scripts/bench-mlp-vs-pytorch.sh [GRADSYNC_BINARY] [PAIRS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
gradsync=${1:-build/bin/gradsync}
pairs=${2:-5}
seconds=${3:-5}
common=(--hidden 256,256 --batch 64 --seconds "$seconds")

ratios=()
for ((i = 1; i <= pairs; i++)); do
  ours=$("$gradsync" bench mlp "${common[@]}" | sed -n 's/.*samples\/s=\([0-9.]*\).*/\1/p')
  theirs_line=$(OMP_NUM_THREADS=1 /usr/bin/python3 experiments/bench/torch_mlp.py "${common[@]}" --threads 1)
  theirs=$(sed -n 's/.*samples\/s=\([0-9.]*\).*/\1/p' <<<"$theirs_line")
  blas=$(sed -n 's/.*blas=\([a-z-]*\).*/\1/p' <<<"$theirs_line")
  ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.2f", a / b }')
  ratios+=("$ratio")
  printf 'pair %d: gradsync %9.0f samples/s   pytorch(%s) %9.0f samples/s   ratio %sx\n' \
    "$i" "$ours" "$blas" "$theirs" "$ratio"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
echo "median ratio gradsync / pytorch: ${median}x over ${pairs} pairs"
