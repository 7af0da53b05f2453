#!/usr/bin/env bash
# Bus bandwidth of gradsync's shared-memory all-reduce (comm.backend shm) against Open MPI over
# its shared-memory transport (mpirun --mca btl self,vader, bench/peers/mpi_allreduce_plain.c:
# MPI_Allreduce called directly) and against Gloo's ring (gradsync's gloo backend), ranks as
# processes of this host, 64 KiB to 64 MiB; beside them, a plain one-core memory copy of the
# same bytes (gradsync_micro_bench's BM_MemoryCopy), the bandwidth a copy in and a copy out are
# bound by. Rounds alternate the sides (shm, vader, shm, vader, ...) so that drift in the
# machine's speed hits both alike; per size it prints each round's out-of-place busbw and the
# median ratios shm/vader and shm/gloo.
#   scripts/bench-shm-vs-mpi.sh [--ranks N[,N...]] [--rounds R]      (defaults: 2,4 and 3)
# The binaries: $GRADSYNC (default build/bin/gradsync) and, beside it, mpi_allreduce_plain and
# gradsync_micro_bench.
set -euo pipefail
cd "$(dirname "$0")/.."
gradsync=${GRADSYNC:-build/bin/gradsync}
# The peers beside the gradsync binary (the same build).
plain=$(dirname "$gradsync")/mpi_allreduce_plain
micro=$(dirname "$gradsync")/gradsync_micro_bench
ranks=2,4
rounds=3
while (($#)); do
  case "$1" in
    --ranks) ranks=$2 ;;
    --rounds) rounds=$2 ;;
    *) echo "error: unknown argument '$1' (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
  shift 2
done
# shellcheck source=scripts/peer-bench-common.sh
source scripts/peer-bench-common.sh
need_tools "$gradsync" "$plain" "$micro"

echo "# $(machine)"
"$micro" --benchmark_filter=MemoryCopy --benchmark_format=csv 2>/dev/null |
  awk -F, '/BM_MemoryCopy/ {gsub(/"/, "", $1); split($1, a, "/"); printf "# memory copy %10d B: %6.2f GB/s (one core)\n", a[2], $6 / 1e9}'
IFS=, read -ra world_sizes <<<"$ranks"
for n in "${world_sizes[@]}"; do
  for ((r = 1; r <= rounds; r++)); do
    table "$gradsync" bench allreduce --backend shm,gloo -n "$n" -b 64K -e 64M -f 4 --ranks-as processes
    awk -v r="$r" '$1 == "shm" || $1 == "gloo" {print $1, $2, $8, r}' "$out/table" >>"$out/n$n"
    table mpirun "${root[@]}" --oversubscribe --bind-to none --mca btl self,vader -np "$n" "$plain" \
      -b 64K -e 64M -f 4
    awk -v r="$r" '$1 == "mpi-plain" {print "vader", $2, $8, r}' "$out/table" >>"$out/n$n"
  done
  echo "# N = $n: out-of-place busbw (GB/s) per round; median ratios over the rounds"
  printf '%10s  %-24s %-24s %-24s %9s %9s\n' bytes shm vader gloo shm/vader shm/gloo
  /usr/bin/python3 - "$out/n$n" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    side, size, busbw, rnd = line.split()
    rows.setdefault(int(size), {}).setdefault(side, {})[int(rnd)] = float(busbw)
for size in sorted(rows):
    s = rows[size]
    def fmt(side):
        return " ".join(f"{s.get(side, {}).get(r, float('nan')):5.2f}" for r in sorted(s.get(side, {})))
    def ratio(a, b):
        pairs = [s[a][r] / s[b][r] for r in s.get(a, {}) if r in s.get(b, {}) and s[b][r] > 0]
        return statistics.median(pairs) if pairs else float("nan")
    print(f"{size:10d}  {fmt('shm'):24s} {fmt('vader'):24s} {fmt('gloo'):24s} "
          f"{ratio('shm', 'vader'):8.2f}x {ratio('shm', 'gloo'):8.2f}x")
PY
done
