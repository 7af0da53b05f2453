#!/usr/bin/env bash
# Training throughput of the MLP 784-256-256-10: gradsync against PyTorch, measured in one run.
#   CPU (default): batch 64 on one thread, against Debian's python3-torch on OpenBLAS
#                  (torch.set_num_threads(1)).
#   GPU (--device gpu): batches 256 and 4096, gradsync's CUDA MLP with CUDA graphs (each step
#                  one graph launch) and without (each kernel launched), against PyTorch eager
#                  on the same GPU, FP32 with TF32 off on both sides (torch_mlp.py checks it and
#                  says tf32=off). PYTHON names an interpreter whose torch has CUDA (default
#                  python3; Debian's python3-torch is CPU-only).
# The runs alternate (A B A B ..., on GPU A B C A B C ...) so that drift in the machine's speed
# (clocks, thermals, neighbours) hits all alike; each round's ratios are printed and, per
# batch, the median ratios last.
#   scripts/bench-mlp-vs-pytorch.sh [--device cpu|gpu] [--gpu N] [--batch B[,B...]]
#                                   [--pairs P] [--seconds S] [--gradsync BINARY]
# The gradsync binary: --gradsync, else $GRADSYNC, else build/bin/gradsync.
# Defaults: CPU --batch 64 --pairs 5 --seconds 5; GPU --batch 256,4096 --pairs 3 --seconds 3
# (about 2 minutes: each run also pays for starting, e.g. importing torch and making the pool).
set -euo pipefail
cd "$(dirname "$0")/.."
gradsync=${GRADSYNC:-build/bin/gradsync}
device=cpu
gpu=0
batches=
pairs=
seconds=
while (($#)); do
  if (($# < 2)); then
    echo "error: $1 needs a value (see the usage at the top of $0)" >&2
    exit 2
  fi
  case "$1" in
    --device) device=$2 ;;
    --gpu) gpu=$2 ;;
    --batch) batches=$2 ;;
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
    batches=${batches:-64}
    pairs=${pairs:-5}
    seconds=${seconds:-5}
    variants=(cpu)  # one gradsync run per round: CUDA graphs are a GPU matter
    theirs_args=(--threads 1)
    ;;
  gpu)
    python=${PYTHON:-python3}
    batches=${batches:-256,4096}
    pairs=${pairs:-3}
    seconds=${seconds:-3}
    variants=(on off)
    theirs_args=(--device "cuda:$gpu")
    if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
      echo "error: $python has no PyTorch with CUDA (set PYTHON to one that has)" >&2
      exit 1
    fi
    ;;
  *) echo "error: --device is cpu or gpu, not '$device'" >&2; exit 2 ;;
esac
if [[ ! -x $gradsync ]]; then
  echo "error: no gradsync binary at '$gradsync' (build it, or set GRADSYNC or --gradsync)" >&2
  exit 1
fi

samples_per_s() { sed -n 's/.*samples\/s=\([0-9.]*\).*/\1/p' <<<"$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { printf "%.2f", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

summary=()
declare -A ours=()  # samples/s of this round's gradsync runs, by variant
IFS=, read -r -a batch_list <<<"$batches"
for batch in "${batch_list[@]}"; do
  common=(--hidden "256,256" --batch "$batch" --seconds "$seconds")
  on_ratios=() off_ratios=() graph_gains=()
  for ((i = 1; i <= pairs; i++)); do
    ours=()
    for variant in "${variants[@]}"; do
      if [[ $device == cpu ]]; then
        line=$("$gradsync" bench mlp "${common[@]}")
      else
        line=$("$gradsync" bench mlp "${common[@]}" --device gpu --gpu "$gpu" --cuda-graphs "$variant")
        gpu_name=$(sed -n 's/.*gpu=\(.*\)$/\1/p' <<<"$line")
      fi
      ours[$variant]=$(samples_per_s "$line")
    done
    theirs_line=$(OMP_NUM_THREADS=1 "$python" bench/torch_mlp.py "${common[@]}" "${theirs_args[@]}")
    theirs=$(samples_per_s "$theirs_line")
    if [[ $device == cpu ]]; then
      # What ran: the BLAS behind PyTorch.
      what="pytorch($(sed -n 's/.*blas=\([a-z-]*\).*/\1/p' <<<"$theirs_line"))"
      r=$(ratio "${ours[cpu]}" "$theirs")
      on_ratios+=("$r")
      printf 'batch %d pair %d: gradsync %10.0f samples/s   %s %10.0f samples/s   ratio %sx\n' \
        "$batch" "$i" "${ours[cpu]}" "$what" "$theirs" "$r"
    else
      # A fair FP32 comparison only: torch_mlp.py prints tf32=off once it has turned TF32 off.
      if [[ $theirs_line != *"tf32=off"* ]]; then
        echo "error: torch_mlp.py did not confirm TF32 off: $theirs_line" >&2
        exit 1
      fi
      on=$(ratio "${ours[on]}" "$theirs")
      off=$(ratio "${ours[off]}" "$theirs")
      gain=$(ratio "${ours[on]}" "${ours[off]}")
      on_ratios+=("$on") off_ratios+=("$off") graph_gains+=("$gain")
      printf 'batch %d pair %d: gradsync graphs %10.0f  no graphs %10.0f  pytorch eager %10.0f samples/s   graphs/pytorch %sx  no-graphs/pytorch %sx  graphs/no-graphs %sx\n' \
        "$batch" "$i" "${ours[on]}" "${ours[off]}" "$theirs" "$on" "$off" "$gain"
    fi
  done
  if [[ $device == cpu ]]; then
    summary+=("median ratio gradsync / pytorch (cpu, batch $batch): $(median "${on_ratios[@]}")x over $pairs pairs")
  else
    summary+=("median ratios at batch $batch on $gpu_name over $pairs rounds: graphs/pytorch $(median "${on_ratios[@]}")x, no-graphs/pytorch $(median "${off_ratios[@]}")x, graphs/no-graphs $(median "${graph_gains[@]}")x")
  fi
done
printf '%s\n' "${summary[@]}"
