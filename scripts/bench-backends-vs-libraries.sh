#!/usr/bin/env bash
# Bus bandwidth of gradsync's CPU backends over loopback TCP against the libraries themselves,
# called directly by the plain peers of bench/peers/ (no gradsync in them): `tcp` against the
# better of Gloo's ring (gloo_allreduce_plain) and Open MPI over TCP (mpirun --mca btl self,tcp
# running mpi_allreduce_plain: MPI_Allreduce), and the `gloo` and `mpi` backends against the
# plain program of their own library, which is what the wrapper costs. Ranks are processes of
# this host. Each backend runs in a bench of its own (`--backend tcp`, then `gloo`, then `mpi`),
# as each plain peer does, so that no backend's rows sit between another's sizes. Each round
# measures one message size at a time, all five sides in turn (a bench per side and size), so
# that the busbws a ratio compares are taken seconds apart and drift in the machine's speed
# hits them alike; each round starts one side later (round 1: tcp first, round 2: gloo first,
# ...), so that no side always follows the same one.
#   scripts/bench-backends-vs-libraries.sh [--ranks N[,N...]] [--rounds R] [--desync-check on|off]
#                                          [--seconds S] [--gloo-algorithm A] [--gloo-pairs P]
#                                          [--sides SIDE[,SIDE...]]
#   (defaults: 2,4, 5, on, 0.3, ring, async and all five sides)
# --sides: which of tcp, gloo, mpi, gloo-plain and mpi-plain run; a ratio is printed where its
# sides all ran. `--sides gloo,mpi,gloo-plain,mpi-plain` measures the wrappers alone, a fifth
# faster a round: a run of many rounds is what their ratios need, since at N = 4 (four
# processes on two cores) one pair's ratio moves by 10% and more from round to round.
# --gloo-algorithm and --gloo-pairs: Gloo's allreduce on both of its sides, gradsync's gloo
# backend (comm.algorithm, comm.gloo_pairs) and gloo_allreduce_plain (--algorithm, --pairs):
# ring or halving_doubling; async, sync or busy_poll (sync pairs with halving_doubling only).
# --seconds: each side's timed work per size and form (`gradsync bench --seconds`, the plain
# peers' alike; 5 to 1000 iterations): at 64 MiB the default is the minimum of 5 iterations,
# which a shared machine's noise can move by 10%.
# Prints, per world size and message size, each side's median busbw (GB/s, out of place / in
# place) and the medians of each round's ratios: tcp / best library, gloo / gloo-plain, mpi /
# mpi-plain (1.00: the same speed). The binaries: $GRADSYNC (default build/bin/gradsync) and,
# beside it, gloo_allreduce_plain and mpi_allreduce_plain.
set -euo pipefail
cd "$(dirname "$0")/.."
gradsync=${GRADSYNC:-build/bin/gradsync}
bin=$(dirname "$gradsync")
ranks=2,4
rounds=5
desync=on
seconds=0.3
gloo_algorithm=ring
gloo_pairs=async
all_sides=(tcp gloo mpi gloo-plain mpi-plain)
sides_list=$(IFS=,; echo "${all_sides[*]}")
while (($#)); do
  case "$1" in
    --ranks) ranks=$2 ;;
    --rounds) rounds=$2 ;;
    --desync-check) desync=$2 ;;
    --seconds) seconds=$2 ;;
    --gloo-algorithm) gloo_algorithm=$2 ;;
    --gloo-pairs) gloo_pairs=$2 ;;
    --sides) sides_list=$2 ;;
    *) echo "error: unknown argument '$1' (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
  shift 2
done
[[ $desync == on || $desync == off ]] || { echo "error: --desync-check takes on or off, not '$desync'" >&2; exit 2; }
[[ $gloo_algorithm =~ ^(ring|halving_doubling)$ ]] || { echo "error: --gloo-algorithm takes ring or halving_doubling, not '$gloo_algorithm'" >&2; exit 2; }
[[ $gloo_pairs =~ ^(async|sync|busy_poll)$ ]] || { echo "error: --gloo-pairs takes async, sync or busy_poll, not '$gloo_pairs'" >&2; exit 2; }
if [[ $gloo_pairs != async && $gloo_algorithm != halving_doubling ]]; then
  echo "error: --gloo-pairs $gloo_pairs needs --gloo-algorithm halving_doubling" >&2
  exit 2
fi
IFS=, read -ra sides <<<"$sides_list"
((${#sides[@]})) || { echo "error: --sides names no side" >&2; exit 2; }
for side in "${sides[@]}"; do
  [[ " ${all_sides[*]} " == *" $side "* ]] ||
    { echo "error: --sides: unknown side '$side' (tcp, gloo, mpi, gloo-plain, mpi-plain)" >&2; exit 2; }
done
# shellcheck source=scripts/peer-bench-common.sh
source scripts/peer-bench-common.sh
need_tools "$gradsync" "$bin/gloo_allreduce_plain" "$bin/mpi_allreduce_plain"
message_sizes=(1M 4M 16M 64M)

# One table's rows of side $1 (its backend column) as "side size busbw_oop busbw_ip round".
rows() { awk -v side="$1" -v r="$2" '$1 == side {print side, $2, $9, $13, r}'; }

echo "# $(machine); desync check $desync; ~$seconds s per size and form; gloo $gloo_algorithm on $gloo_pairs pairs"
IFS=, read -ra world_sizes <<<"$ranks"
# One side's table for world size $2, round $3, message size $4, its row appended to $out/n$2.
run_side() {
  local side=$1 n=$2 r=$3 how
  local sizes=(-b "$4" -e "$4" --seconds "$seconds")
  case $side in
    tcp | gloo | mpi)
      # Ranks as processes; mpi's are started by mpirun, its default.
      how=(--ranks-as processes)
      [[ $side == mpi ]] && how=()
      table "$gradsync" bench allreduce --backend "$side" -n "$n" "${sizes[@]}" "${how[@]}" \
        --desync-check "$desync" --gloo-algorithm "$gloo_algorithm" --gloo-pairs "$gloo_pairs" ;;
    gloo-plain)
      table "$bin/gloo_allreduce_plain" -n "$n" "${sizes[@]}" --algorithm "$gloo_algorithm" \
        --pairs "$gloo_pairs" ;;
    mpi-plain)
      table mpirun "${root[@]}" --oversubscribe --bind-to none --mca btl self,tcp \
        --mca btl_tcp_if_include lo -np "$n" "$bin/mpi_allreduce_plain" "${sizes[@]}" ;;
  esac
  rows "$side" "$r" <"$out/table" >>"$out/n$n"
}

for n in "${world_sizes[@]}"; do
  for ((r = 1; r <= rounds; r++)); do
    for size in "${message_sizes[@]}"; do
      for ((k = 0; k < ${#sides[@]}; k++)); do
        run_side "${sides[(r - 1 + k) % ${#sides[@]}]}" "$n" "$r" "$size"
      done
    done
  done
  echo
  echo "N = $n: busbw medians over $rounds rounds (GB/s, out of place / in place), medians of each round's ratio"
  echo
  /usr/bin/python3 - "$out/n$n" "${all_sides[@]}" <<'PY'
import statistics, sys
rows = {}  # size -> side -> round -> (oop, ip)
for line in open(sys.argv[1]):
    side, size, oop, ip, rnd = line.split()
    rows.setdefault(int(size), {}).setdefault(side, {})[int(rnd)] = (float(oop), float(ip))
ran = {side for s in rows.values() for side in s}
SIDES = [side for side in sys.argv[2:] if side in ran]  # the script's order
RATIOS = [(name, a, bs) for name, a, bs in (("tcp / best", "tcp", ["gloo-plain", "mpi-plain"]),
                                              ("gloo / gloo-plain", "gloo", ["gloo-plain"]),
                                              ("mpi / mpi-plain", "mpi", ["mpi-plain"]))
          if {a, *bs} <= ran]

def median(values):
    return statistics.median(values) if values else float("nan")

def ratio(s, a, bs, form):
    """Median over rounds of a / max(b for b in bs), rounds where every side ran."""
    out = []
    for r, va in s.get(a, {}).items():
        best = [s[b][r][form] for b in bs if r in s.get(b, {})]
        if len(best) == len(bs) and max(best) > 0:
            out.append(va[form] / max(best))
    return median(out)

def pair(x, y):
    return f"{x:.2f} / {y:.2f}"

print("| size | " + " | ".join(SIDES + [name for name, _, _ in RATIOS]) + " |")
print("|---:|" + "---|" * (len(SIDES) + len(RATIOS)))
for size in sorted(rows):
    s = rows[size]
    cells = [pair(*(median([v[f] for v in s.get(side, {}).values()]) for f in (0, 1)))
             for side in SIDES]
    ratios = [pair(*(ratio(s, a, bs, f) for f in (0, 1))) for _, a, bs in RATIOS]
    label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
    print(f"| {label} | " + " | ".join(cells + ratios) + " |")
PY
done
