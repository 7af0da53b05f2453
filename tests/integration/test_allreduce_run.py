"""`gradsync run` with the ring all-reduce: N worker processes, results merged, and teardown.

1. A preset with single, allreduce-2 and allreduce-3 runs; each allreduce run writes one
   metrics row per rank per step, a merged trace with a track per rank, a summary, and ends
   at the same test accuracy as single (same global batch, same trajectory up to rounding).
2. A worker killed with SIGKILL mid-run ends the whole run within the timeout, with a message
   naming the rank and the signal, and leaves no process behind: under tcp, shm, gloo and mpi
   (whose ranks mpirun starts, and whose last line is mpirun's report of the rank); under shm
   it also leaves no segment in /dev/shm.
"""
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from checks import (Checks, children_of, kill_one_and_check_teardown, run_preset, still_alive,
                    wait_after_kill)

gradsync, preset = sys.argv[1], sys.argv[2]
check = Checks()


def built_backends():
    """The CPU backends `gradsync run --keys` says this build has."""
    keys = subprocess.run([gradsync, "run", "--keys"], capture_output=True, text=True).stdout
    line = next(l for l in keys.splitlines() if l.startswith("comm.backend"))
    built = line.split("(this build: ")[1].rstrip(")").split(", ")
    return [b for b in ["tcp", "shm", "gloo", "mpi"] if b in built]


def shm_segments():
    """gradsync's shared-memory segments in /dev/shm (allreduce/shm/shm_segment.h)."""
    return {n for n in os.listdir("/dev/shm") if n.startswith("gradsync-")}


def kill_mpi_rank_and_check_teardown(launcher, rank, bound_s):
    """mpi: `gradsync run` starts mpirun, which starts the ranks. SIGKILL to one rank must end
    the run within the bound, its last line naming that rank (mpirun's report) and nothing
    left behind."""
    ranks, deadline = {}, time.time() + 30
    while len(ranks) < 3 and time.time() < deadline:
        time.sleep(0.2)
        for mpirun, _ in children_of(launcher.pid):
            for pid, _ in children_of(mpirun):
                env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                for var in env:
                    if var.startswith(b"OMPI_COMM_WORLD_RANK="):
                        ranks[int(var.split(b"=")[1])] = pid
    check(len(ranks) == 3, f"mpi: mpirun started 3 ranks ({ranks})")
    if rank not in ranks:
        launcher.kill()
        launcher.communicate()
        return
    time.sleep(1.5)
    os.kill(ranks[rank], signal.SIGKILL)
    elapsed, last = wait_after_kill(launcher, bound_s)
    check(launcher.returncode not in (0, None), f"mpi: the run failed ({launcher.returncode})")
    check(elapsed < bound_s, f"mpi: the run ended {elapsed:.1f} s after the kill")
    check(f"process rank {rank} " in last and "signal 9" in last,
          f"mpi: the last line names rank {rank} and its signal: {last!r}")
    time.sleep(0.5)
    alive = still_alive(ranks.values())
    check(alive == [], f"mpi: no rank left behind: {alive}")


with tempfile.TemporaryDirectory() as out:
    proc, top = run_preset(check, gradsync, preset, out, timeout=240)
    accuracy = {}
    for run, workers in [("single", 1), ("allreduce-2", 2), ("allreduce-3", 3)]:
        d = os.path.join(top, run)
        summary = json.load(open(os.path.join(d, "summary.json")))
        accuracy[run] = summary["final_test_accuracy"]
        check(summary["steps"] == 120, f"{run}: 120 steps")
        if workers > 1:
            check(summary["backend"] == "tcp", f"{run}: the ring ran ({summary['backend']})")
        rows = list(csv.DictReader(open(os.path.join(d, "metrics.csv"))))
        check(len(rows) == 120 * workers, f"{run}: {len(rows)} rows, expected {120 * workers}")
        trace = json.load(open(os.path.join(d, "trace.json")))
        ranks = {e["pid"] for e in trace["traceEvents"] if e.get("ph") == "X"}
        check(ranks == set(range(workers)), f"{run}: one trace process per rank, got {ranks}")
        leftovers = [n for n in os.listdir(d) if n.startswith("rank") or ".rank" in n]
        check(leftovers == [], f"{run}: per-rank files merged and removed: {leftovers}")
        if workers > 1:
            # Ring: each rank sends 2(N-1)/N of the model per step, up to segment rounding.
            params = summary["parameters"]
            sent = sum(int(r["bytes_sent"]) for r in rows if r["rank"] == "1")
            expected = 120 * 2 * (workers - 1) / workers * params * 4
            check(abs(sent - expected) / expected < 0.01,
                  f"{run}: rank 1 sent {sent} bytes, ring predicts {expected:.0f}")
    for run in ["allreduce-2", "allreduce-3"]:
        check(abs(accuracy[run] - accuracy["single"]) <= 0.01,
              f"{run}: accuracy {accuracy[run]:.4f} vs single {accuracy['single']:.4f}")

    # A rank killed mid-run, under each CPU backend this build has.
    for backend in built_backends():
        segments_before = shm_segments()
        launcher = subprocess.Popen([gradsync, "run", preset, "--output", out, "--only",
                                     "allreduce-3", "--set", "train.steps=100000",
                                     "--set", "comm.timeout_s=10",
                                     "--set", f"comm.backend={backend}"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if backend == "mpi":
            kill_mpi_rank_and_check_teardown(launcher, rank=1, bound_s=15)
        else:
            kill_one_and_check_teardown(check, launcher, expected=3,
                                        pick=lambda procs: sorted(p for p, _ in procs)[1],
                                        settle_s=1.5, bound_s=15)
        left = shm_segments() - segments_before
        check(left == set(), f"{backend}: no shared-memory segment left in /dev/shm: {left}")

check.finish()
