"""`gradsync bench allreduce --backend`: nccl-tests' table with a backend column, every row under
the column names with #wrong 0, the units row and the footer; --json as one valid document; ranks
as threads, as processes started by gradsync, and under mpirun (where it is installed, with the
mpi backend where built); one-line refusals (exit 2) for an unknown backend and for --no-gloo;
Gloo's halving-doubling on sync pairs (--gloo-algorithm, --gloo-pairs), with sizes past one sync
message, and its refusal with the ring; and the plain peers (bench/peers/), whose tables pair
with gradsync's, gloo_allreduce_plain's sync mode included.

Usage: test_bench_backends.py path/to/gradsync   (the peers are looked for beside it)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from checks import Checks

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import nccl_tables  # noqa: E402  (bench/nccl_tables.py: the parser the figures use too)

gradsync = sys.argv[1]
bin_dir = os.path.dirname(os.path.abspath(gradsync))
check = Checks()
SIZES = ["-b", "4K", "-e", "16K", "-f", "2"]  # 4K, 8K, 16K
QUICK = SIZES + ["-w", "1", "--iters", "3", "--timeout-s", "30"]
MPIRUN = shutil.which("mpirun")
AS_ROOT = ["--allow-run-as-root"] if os.geteuid() == 0 else []


def run(args, timeout=120):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def bench(*args):
    return run([gradsync, "bench", "allreduce", *args])


def built_backends():
    """What this build's `gradsync run --keys` lists for comm.backend."""
    keys = run([gradsync, "run", "--keys"]).stdout
    line = next((l for l in keys.splitlines() if l.startswith("comm.backend")), "")
    return line.split("this build: ")[-1].rstrip(")").split(", ") if "this build: " in line else []


def check_table(what, proc, backends, sizes=(4096, 8192, 16384), ranks=2):
    """The table parses; each size has every backend in turn, in order; nothing is wrong."""
    check(proc.returncode == 0, f"{what}: exit {proc.returncode}: {proc.stderr[-2000:]}")
    try:
        table = nccl_tables.parse(proc.stdout)
    except ValueError as e:
        check(False, f"{what}: {e}\n{proc.stdout}")
        return None
    got = [(r["backend"], r["size"]) for r in table["rows"]]
    check(got == [(b, s) for s in sizes for b in backends], f"{what}: rows {got}")
    factor = 2 * (ranks - 1) / ranks
    for row in table["rows"]:
        check(row["count"] * 4 == row["size"] and row["type"] == "float"
              and row["redop"] == "sum" and row["root"] == -1, f"{what}: row {row}")
        for form in nccl_tables.FORMS:
            m = row[form]
            check(m["wrong"] == 0, f"{what}: {row['backend']} {row['size']} {form} #wrong")
            check(m["time"] > 0 and abs(m["busbw"] - m["algbw"] * factor) <= 0.01 * factor + 0.01,
                  f"{what}: {form} time/busbw {m}")
    check(table["wrong"] == 0, f"{what}: out of bounds values {table['wrong']}")
    expected = set(backends) if len(backends) > 1 else {""}
    check(set(table["avg_busbw"]) == expected, f"{what}: averages {table['avg_busbw']}")
    check(f"# nRanks {ranks} " in proc.stdout, f"{what}: header names the ranks")
    return table


built = built_backends()
check("tcp" in built, f"run --keys lists the backends: {built}")
threads = [b for b in ("tcp", "gloo") if b in built]

# Default backends, ranks as threads.
threads_run = bench(*QUICK)
check_table("threads", threads_run, threads)
# One backend: the footer's average carries no name, as nccl-tests' own.
check_table("tcp alone", bench(*QUICK, "--backend", "tcp"), ["tcp"])
# Ranks as processes of gradsync's launcher: rank 0's rows reach this stdout.
check_table("processes", bench(*QUICK, "-n", "3", "--ranks-as", "processes",
                               "--backend", ",".join(threads)), threads, ranks=3)

# --json: one document, parameters and one result per backend and size.
proc = bench(*QUICK, "--json")
try:
    doc = json.loads(proc.stdout)
    results = doc["results"]
    check([(r["backend"], r["size"]) for r in results]
          == [(b, s) for s in (4096, 8192, 16384) for b in threads], f"json rows {results}")
    check(all(r[f]["nwrong"] == 0 and r[f]["bus_bw"] is not None and r[f]["iters"] == 3
              for r in results for f in ("out_of_place", "in_place")), "json: nwrong 0, bus_bw")
    check(doc["parameters"]["ranks"] == 2 and doc["parameters"]["min_bytes"] == 4096
          and doc["out_of_bounds"] == {"count": 0, "okay": True}, f"json parameters {doc}")
    check(set(doc["average_bus_bandwidth"]) == set(threads), "json: an average per backend")
except (ValueError, KeyError) as e:
    check(False, f"--json is not the document: {e!r}\n{proc.stdout}\n{proc.stderr}")

# --seconds sets the auto iterations' timed work, in rank processes too: ten times the work, more
# iterations (5 to 1000), and the header and the JSON say how long each form aimed at.
iters_at = {}
for seconds in ("0.002", "0.2"):
    args = ["-b", "4K", "-e", "4K", "-w", "1", "--iters", "0", "--seconds", seconds,
            "--ranks-as", "processes", "--backend", "tcp"]
    table, doc = bench(*args), bench(*args, "--json")
    check(table.returncode == 0 and f"iters: 0 (auto, ~{seconds} s per form)" in table.stdout,
          f"--seconds {seconds}: the header says it\n{table.stdout}{table.stderr}")
    try:
        parsed = json.loads(doc.stdout)
        check(parsed["parameters"]["auto_seconds"] == float(seconds), f"json auto_seconds {seconds}")
        iters_at[seconds] = parsed["results"][0]["out_of_place"]["iters"]
    except (ValueError, KeyError, IndexError) as e:
        check(False, f"--seconds {seconds} --json: {e!r}\n{doc.stdout}\n{doc.stderr}")
# A 4 KiB allreduce takes 20-100 us here: 0.2 s is the 1000-iteration cap and 0.002 s tens of
# iterations. Only a probe slowed past 40 ms would clamp both to 5.
if len(iters_at) == 2 and iters_at["0.2"] > 5:
    check(5 <= iters_at["0.002"] < iters_at["0.2"] <= 1000,
          f"more timed work, more iterations: {iters_at}")

# Refusals: one line on stderr, exit 2, nothing run.
for args, needles in [(["--backend", "tcp,ucx"], ["--backend", "'ucx'", "tcp, shm, gloo, mpi"]),
                      (["--no-gloo"], ["--no-gloo", "--backend"]),
                      (["--backend", "gloo,gloo"], ["--backend", "twice"])]:
    proc = bench(*QUICK, *args)
    lines = proc.stderr.strip().splitlines()
    check(proc.returncode == 2 and proc.stdout == "" and len(lines) == 1
          and all(n in lines[0] for n in needles),
          f"{args}: exit {proc.returncode}, stdout {proc.stdout!r}, stderr {proc.stderr!r}")
for backend, package in (("gloo", "libgloo-dev"), ("mpi", "libopenmpi-dev")):
    if backend not in built:
        proc = bench(*QUICK, "--backend", backend)
        check(proc.returncode == 2 and package in proc.stderr
              and len(proc.stderr.strip().splitlines()) == 1, f"{backend} not built: {proc.stderr}")

# Under mpirun: tcp and gloo as mpirun's processes, and the mpi backend where built.
if MPIRUN:
    mpi = threads + (["mpi"] if "mpi" in built else [])
    check_table("mpirun", bench(*QUICK, "--ranks-as", "mpirun", "--backend", ",".join(mpi)), mpi)
else:
    print("skipped: mpirun is not installed (Debian: openmpi-bin)")

# Gloo's sync pairs: every row exact, also past one message's worth (net.core.wmem_max bytes: the
# allreduce cut into pieces), as processes; with the ring, one line naming the option.
SYNC = ["--gloo-algorithm", "halving_doubling", "--gloo-pairs", "sync"]
with open("/proc/sys/net/core/wmem_max") as f:
    past_one_piece = 4 * int(f.read()) * 2
BIG = ["-b", "4K", "-e", str(past_one_piece), "-f", str(past_one_piece // 4096),
       "-w", "1", "--iters", "2", "--timeout-s", "30"]
if "gloo" in built:
    check_table("gloo sync pairs", bench(*BIG, "--backend", "gloo", "--ranks-as", "processes",
                                         *SYNC), ["gloo"], sizes=(4096, past_one_piece))
    proc = bench(*QUICK, "--backend", "gloo", "--gloo-pairs", "sync")
    check(proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
          and "--gloo-pairs: sync pairs take --gloo-algorithm halving_doubling only" in proc.stderr,
          f"sync pairs with the ring: {proc.returncode} {proc.stderr}")

# The plain peers, where built: the same table, pairing with gradsync's rows by size.
gloo_plain = os.path.join(bin_dir, "gloo_allreduce_plain")
if os.path.exists(gloo_plain):
    check_table("gloo_allreduce_plain on sync pairs",
                run([gloo_plain, "-n", "2", *BIG[:-2], "--algorithm", "halving_doubling",
                     "--pairs", "sync"]), ["gloo-plain"], sizes=(4096, past_one_piece))
    plain_run = run([gloo_plain, "-n", "2", *QUICK[:-2]])
    check_table("gloo_allreduce_plain", plain_run, ["gloo-plain"])
    # Paired by size, as the figure pairs them (bench/nccl_tables.py).
    with tempfile.TemporaryDirectory() as tmp:
        ours, theirs = os.path.join(tmp, "ours.txt"), os.path.join(tmp, "theirs.txt")
        for path, text in ((ours, threads_run.stdout), (theirs, plain_run.stdout)):
            with open(path, "w") as f:
                f.write(text)
        paired = run([sys.executable, os.path.join(HERE, "..", "..", "bench", "nccl_tables.py"),
                      "--a", ours, "--b", theirs, "--a-backend", threads[-1]])
        lines = [l for l in paired.stdout.splitlines() if not l.startswith("#")]
        check(paired.returncode == 0 and len(lines) == 3, f"paired: {paired.stdout}{paired.stderr}")
mpi_plain = os.path.join(bin_dir, "mpi_allreduce_plain")
if os.path.exists(mpi_plain) and MPIRUN:
    check_table("mpi_allreduce_plain",
                run([MPIRUN, *AS_ROOT, "--oversubscribe", "-np", "2", mpi_plain, *QUICK[:-2]]),
                ["mpi-plain"])

check.finish()
