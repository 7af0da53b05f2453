#!/usr/bin/env bash
# Training samples/s of gradsync's `allreduce` (or `zero`) over each CPU backend (tcp; gloo, its
# ring; mpi) against PyTorch DDP over gloo (bench/torch_ddp.py under torchrun, Debian's
# python3-torch): the same MLP (784-256-256-10, the quickstart's, unless --hidden), SGD (lr 0.05,
# momentum 0.9), per-rank batch, ranks N, bucket size (DDP's bucket_cap_mb = comm.bucket_mb) and
# number of timed steps. gradsync runs experiments/presets/backends.yaml's run for that backend,
# with those keys set (model.hidden among them).
# --strategy pairs gradsync's strategy with DDP's optimizer (labels in the lines: gradsync/zero1,
# ddp-gloo/zero):
#   allreduce  gradsync's strategy: allreduce           DDP, torch.optim.SGD
#   zero       strategy=zero, zero.stage=1 (each rank   DDP, ZeroRedundancyOptimizer(optimizer_class=
#              keeps its 1/N of the momentum; reduce-   torch.optim.SGD): DDP's all-reduce, each
#              scatter, shard update, all-gather)       rank's shard updated, then broadcast
# --hidden 4096,4096 is the zero preset's model (784-4096-4096-10, 20M parameters); the zero
# preset's other keys (batch, bucket_mb 25, weight decay) are not taken: pass --batch, --bucket-mb.
# --compression pairs gradsync's comm.compression with the DDP communication hook that is its
# peer, on loopback without emulation:
#   none      gradsync's plain all-reduce           DDP's built-in all-reduce (no hook)
#   fp16      comm.compression=fp16                 default_hooks.fp16_compress_hook
#   powersgd  comm.compression=powersgd,            powerSGD_hook, PowerSGDState(
#             comm.powersgd_rank=4                    matrix_approximation_rank=4,
#                                                     use_error_feedback=True, warm_start=True)
# PowerSGD's uncompressed warm-up is --start-step on both sides (comm.compression_start_step,
# start_powerSGD_iter; PyTorch refuses < 2 with error feedback or warm start on). gradsync's
# clock counts those steps; torch_ddp.py's 50 untimed warm-up steps absorb them, so with the
# default 10 of 2000 steps the two windows differ by 0.5% of uncompressed steps. fp16 starts at
# step 0 on both sides (fp16_compress_hook has no warm-up).
# Each gradsync run is followed by its own DDP run (A B A B ...), so that drift in the
# machine's speed hits both sides of a pair alike; each pair's ratio is printed with both
# sides' compute and communication per step and the CPU share other processes took during
# each side ("others", below), and per (strategy, backend, compression, N) the median ratio last.
#   gradsync: samples/s and mean_step_s from summary.json (its clock counts training steps
#             only: data loading and evaluation stay out); compute = forward, backward and
#             SGD step (under zero, of its shard), comm = communicate + wait, the reduction
#             (and zero's all-gather) time not hidden by backward (compressing included).
#   DDP:      compute = a step under no_sync() (no reduction, no hook; under zero the shard's
#             update without its broadcast), comm = a synchronised step less that
#             (torch_ddp.py says how both are timed).
#   scripts/bench-ddp-vs-gradsync.sh [--ranks N[,N...]] [--backend B[,B...]]
#                                    [--strategy S[,S...]] [--compression C[,C...]]
#                                    [--hidden H[,H...]] [--batch B] [--steps S]
#                                    [--start-step K] [--bucket-mb M] [--pairs P]
#                                    [--desync-check on|off] [--gloo-pairs async|sync|busy_poll]
#                                    [--gradsync BINARY]
# Defaults: --ranks 2,4, --backend the ones of tcp, gloo, mpi this build has, --strategy
# allreduce, --compression none, --hidden 256,256, --batch 64, --steps 2000, --start-step 10,
# --bucket-mb 1 (backends.yaml's), --pairs 3, --desync-check on.
# --desync-check off sets comm.desync_check: false, which leaves out gloo's and mpi's header
# round before each collective (tcp's header rides in its stream either way): DDP runs without
# one unless TORCH_DISTRIBUTED_DEBUG asks, so off compares like with like, and on says what
# gradsync's default check costs.
# --gloo-pairs sync (busy_poll) runs the gloo backend's halving-doubling on Gloo's sync pairs
# (backends.yaml's gloo-hd-sync runs: the allreduce's thread reads its own sockets, no hand-off
# from Gloo's event loop); async, the default, Gloo's ring on async pairs, as ProcessGroupGloo
# runs it (DDP has no way to pick sync pairs: its Gloo collectives use unbound buffers).
# The gradsync binary: --gradsync, else $GRADSYNC, else build/bin/gradsync.
set -euo pipefail
cd "$(dirname "$0")/.."
gradsync=${GRADSYNC:-build/bin/gradsync}
python=/usr/bin/python3  # Debian's python3-torch, whatever python3 is first on PATH
ranks=2,4
backends=
compressions=none
strategies=allreduce
hidden=256,256
powersgd_rank=4
start_step=10
batch=64
steps=2000
bucket_mb=1
pairs=3
desync=on
gloo_pairs=async
lr=0.05
momentum=0.9
while (($#)); do
  if (($# < 2)); then
    echo "error: $1 needs a value (see the usage at the top of $0)" >&2
    exit 2
  fi
  case "$1" in
    --ranks) ranks=$2 ;;
    --backend) backends=$2 ;;
    --compression) compressions=$2 ;;
    --strategy) strategies=$2 ;;
    --hidden) hidden=$2 ;;
    --start-step) start_step=$2 ;;
    --batch) batch=$2 ;;
    --steps) steps=$2 ;;
    --bucket-mb) bucket_mb=$2 ;;
    --pairs) pairs=$2 ;;
    --desync-check) desync=$2 ;;
    --gloo-pairs) gloo_pairs=$2 ;;
    --gradsync) gradsync=$2 ;;
    *) echo "error: unknown argument '$1' (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
  shift 2
done
if [[ ! -x $gradsync ]]; then
  echo "error: no gradsync binary at '$gradsync' (build it, or set GRADSYNC or --gradsync)" >&2
  exit 1
fi

# The backends this build has, from the comm.backend line of --keys: "(this build: auto, tcp, ...)".
built=$("$gradsync" run --keys | sed -n 's/^comm\.backend .*(this build: \([^)]*\)).*/\1/p' | tr -d ' ')
if [[ -z $backends ]]; then
  backends=$(for b in tcp gloo mpi; do [[ ,$built, == *,$b,* ]] && printf '%s,' "$b"; done)
  backends=${backends%,}
fi
IFS=, read -r -a backend_list <<<"$backends"
for b in "${backend_list[@]}"; do
  if [[ ! $b =~ ^(tcp|gloo|mpi)$ || ,$built, != *,$b,* ]]; then
    echo "error: backend '$b': this compares tcp, gloo and mpi, where built (this build: $built)" >&2
    exit 2
  fi
done
IFS=, read -r -a compression_list <<<"$compressions"
for c in "${compression_list[@]}"; do
  if [[ ! $c =~ ^(none|fp16|powersgd)$ ]]; then
    echo "error: compression '$c': this compares none, fp16 and powersgd" >&2
    exit 2
  fi
done
IFS=, read -r -a strategy_list <<<"$strategies"
for s in "${strategy_list[@]}"; do
  if [[ ! $s =~ ^(allreduce|zero)$ ]]; then
    echo "error: strategy '$s': this compares allreduce and zero (stage 1)" >&2
    exit 2
  fi
done
if [[ ! $hidden =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]]; then
  echo "error: --hidden '$hidden': comma-separated layer widths, as 256,256" >&2
  exit 2
fi
if [[ ! $gloo_pairs =~ ^(async|sync|busy_poll)$ ]]; then
  echo "error: --gloo-pairs takes async, sync or busy_poll, not '$gloo_pairs'" >&2
  exit 2
fi
if [[ $desync != on && $desync != off ]]; then
  echo "error: --desync-check takes on or off, not '$desync'" >&2
  exit 2
fi
if [[ ! $start_step =~ ^[0-9]+$ ]] || ((start_step < 2)); then
  echo "error: --start-step $start_step: PowerSGDState needs start_powerSGD_iter >= 2 with error feedback" >&2
  exit 2
fi

preset=experiments/presets/backends.yaml
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# On a shared machine a pair is fair only if both sides saw the same background load, so each
# run also reports the share of all cores that other processes (and the hypervisor: steal) used
# meanwhile: the machine's busy time from /proc/stat less the CPU time of this shell's children
# (fields cutime and cstime of its /proc stat: every descendant reaped, ranks included).
# Both read /proc in the shell that ran the command (not in a $(...), whose children differ),
# and others_share leaves its answer in $others.
start_others() {
  local cpu self
  read -r -a cpu </proc/stat
  read -r -a self </proc/$BASHPID/stat
  busy0=$((cpu[1] + cpu[2] + cpu[3] + cpu[6] + cpu[7] + cpu[8]))
  all0=$((busy0 + cpu[4] + cpu[5]))
  own0=$((self[15] + self[16]))
}
others_share() {
  local cpu self busy all own
  read -r -a cpu </proc/stat
  read -r -a self </proc/$BASHPID/stat
  busy=$((cpu[1] + cpu[2] + cpu[3] + cpu[6] + cpu[7] + cpu[8] - busy0))
  all=$((cpu[1] + cpu[2] + cpu[3] + cpu[4] + cpu[5] + cpu[6] + cpu[7] + cpu[8] - all0))
  own=$((self[15] + self[16] - own0))
  others=$(awk -v b="$busy" -v o="$own" -v a="$all" 'BEGIN { x = a > 0 ? 100 * (b - o) / a : 0; printf "%.0f", x < 0 ? 0 : x }')
}

# The keys for a strategy, one --set each, left in the array $strategy_sets; the DDP optimizer
# that is its peer in $optimizer.
strategy_sets() {
  case $1 in
    allreduce) strategy_sets=(--set strategy=allreduce); optimizer=sgd ;;
    zero) strategy_sets=(--set strategy=zero --set zero.stage=1); optimizer=zero ;;
  esac
}

# The comm.* keys for a compression method, one --set each, left in the array $sets.
compression_sets() {
  case $1 in
    none) sets=(--set comm.compression=none) ;;
    fp16) sets=(--set comm.compression=fp16 --set comm.compression_start_step=0) ;;
    powersgd) sets=(--set comm.compression=powersgd --set comm.powersgd_rank="$powersgd_rank"
        --set comm.compression_start_step="$start_step") ;;
  esac
}

# One gradsync run; prints "samples/s compute_s comm_s others%". The preset's run for the
# backend at N if it has one (tcp-4, gloo-ring-4, mpi-4), else its N = 2 run with workers N.
run_gradsync() {
  local backend=$1 n=$2 compression=$3 strategy=$4 out=$work/gradsync-$RANDOM template run sets
  local strategy_sets optimizer
  compression_sets "$compression"
  strategy_sets "$strategy"
  template=$backend
  [[ $backend == gloo ]] && template=gloo-ring  # Gloo's ring, as PyTorch's ProcessGroupGloo
  [[ $backend == gloo && $gloo_pairs != async ]] && template=gloo-hd-sync
  run=$template-$n
  grep -q "name: $run," "$preset" || run=$template-2
  start_others
  if ! "$gradsync" run "$preset" --only "$run" --output "$out" --set workers="$n" \
      --set train.steps="$steps" --set train.eval_every="$steps" --set train.batch="$batch" \
      --set train.lr="$lr" --set train.momentum="$momentum" --set comm.bucket_mb="$bucket_mb" \
      --set model.hidden="$hidden" --set output.progress=off "${strategy_sets[@]}" "${sets[@]}" \
      --set comm.desync_check="$([[ $desync == on ]] && echo true || echo false)" \
      $([[ $backend == gloo ]] && echo --set comm.gloo_pairs="$gloo_pairs") \
      >"$out.log" 2>&1; then
    echo "error: gradsync run $run failed:" >&2
    cat "$out.log" >&2
    exit 1
  fi
  others_share
  "$python" -c 'import json, sys; s = json.load(open(sys.argv[1])); m = s["mean_step_s"]
print(s["samples_per_s"], m["compute"], m["communicate"] + m["wait"], sys.argv[2])' \
    "$out"/latest/"$run"/summary.json "$others"
}

# One DDP run under torchrun with the hook for the compression; prints "samples/s compute_s
# comm_s others% blas hook optimizer" (hook and optimizer as torch_ddp.py reports them). -r 1 -t 2: torchrun's
# default stream handling crashes under Python 3.11, so rank 0's stdout goes to a log file.
# The timeout: a rank that hangs (as one did at exit, before torch_ddp.py's os._exit) fails the
# pair instead of the whole script waiting forever.
run_ddp() {
  local n=$1 compression=$2 strategy=$3 logs=$work/ddp-$RANDOM port strategy_sets optimizer
  strategy_sets "$strategy"
  port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  start_others
  if ! OMP_NUM_THREADS=1 timeout -k 10 600 "$python" -m torch.distributed.run --nproc_per_node "$n" \
      --master_addr 127.0.0.1 --master_port "$port" -r 1 -t 2 --log_dir "$logs" \
      bench/torch_ddp.py --json --batch "$batch" --steps "$steps" --bucket-mb "$bucket_mb" \
      --lr "$lr" --momentum "$momentum" --hook "$compression" --powersgd-rank "$powersgd_rank" \
      --start-iter "$start_step" --optimizer "$optimizer" --hidden "$hidden" >"$logs.log" 2>&1; then
    echo "error: torchrun bench/torch_ddp.py failed:" >&2
    cat "$logs.log" >&2
    exit 1
  fi
  others_share
  "$python" -c 'import json, sys; r = json.load(open(sys.argv[1]))
print(r["samples_per_s"], r["compute_s"], r["communicate_s"], sys.argv[2], r["blas"], r["hook"],
      r["optimizer"])' \
    "$logs"/*/attempt_0/0/stdout.log "$others"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { printf "%.2f", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "MLP 784-${hidden//,/-}-10, batch $batch per rank, $steps timed steps, bucket $bucket_mb MiB, desync check $desync, gloo pairs $gloo_pairs, powersgd rank $powersgd_rank from step $start_step; $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
summary=()
IFS=, read -r -a rank_list <<<"$ranks"
for n in "${rank_list[@]}"; do
 for strategy in "${strategy_list[@]}"; do
  for backend in "${backend_list[@]}"; do
    for compression in "${compression_list[@]}"; do
      ratios=()
      for ((i = 1; i <= pairs; i++)); do
        read -r ours our_compute our_comm our_others < <(run_gradsync "$backend" "$n" "$compression" "$strategy")
        read -r theirs their_compute their_comm their_others blas hook optimizer < <(run_ddp "$n" "$compression" "$strategy")
        r=$(ratio "$ours" "$theirs")
        ratios+=("$r")
        # The labels: gradsync or gradsync/zero1; ddp-gloo[+hook][/zero] (the optimizer DDP ran).
        ddp="ddp-gloo"
        [[ $hook != none ]] && ddp+="+$hook"
        [[ $optimizer == zero ]] && ddp+="/zero"
        ours_label=gradsync
        [[ $strategy == zero ]] && ours_label+="/zero1"
        awk -v n="$n" -v s="$strategy" -v b="$backend" -v c="$compression" -v i="$i" -v a="$ours" \
            -v g="$ours_label" -v ac="$our_compute" -v am="$our_comm" -v d="$ddp" -v blas="$blas" \
            -v t="$theirs" -v tc="$their_compute" -v tm="$their_comm" -v r="$r" -v ao="$our_others" \
            -v to="$their_others" \
            'BEGIN { printf "N %d %-9s %-4s %-8s pair %d: %s %7.0f samples/s (compute %.3f ms, comm %.3f ms)   %s(%s) %7.0f samples/s (compute %.3f ms, comm %.3f ms)   ratio %sx   others %d%% / %d%%\n", n, s, b, c, i, g, a, ac * 1e3, am * 1e3, d, blas, t, tc * 1e3, tm * 1e3, r, ao, to }'
      done
      summary+=("median ratio gradsync/ddp ($strategy, $backend, $compression, N = $n, batch $batch, MLP 784-${hidden//,/-}-10): $(median "${ratios[@]}")x over $pairs pairs")
    done
  done
 done
done
printf '%s\n' "${summary[@]}"
