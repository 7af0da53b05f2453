"""`gradsync run` with the ring all-reduce: N worker processes, results merged, and teardown.

1. A preset with single, allreduce-2 and allreduce-3 runs; each allreduce run writes one
   metrics row per rank per step, a merged trace with a track per rank, a summary, and ends
   at the same test accuracy as single (same global batch, same trajectory up to rounding).
2. A worker killed with SIGKILL mid-run ends the whole run within the timeout, with a message
   naming the rank and the signal, and leaves no process behind.
"""
import csv
import json
import os
import subprocess
import sys
import tempfile

from checks import Checks, kill_one_and_check_teardown, run_preset

gradsync, preset = sys.argv[1], sys.argv[2]
check = Checks()


with tempfile.TemporaryDirectory() as out:
    proc, top = run_preset(check, gradsync, preset, out, timeout=240)
    accuracy = {}
    for run, workers in [("single", 1), ("allreduce-2", 2), ("allreduce-3", 3)]:
        d = os.path.join(top, run)
        summary = json.load(open(os.path.join(d, "summary.json")))
        accuracy[run] = summary["final_test_accuracy"]
        check(summary["steps"] == 120, f"{run}: 120 steps")
        rows = list(csv.DictReader(open(os.path.join(d, "metrics.csv"))))
        check(len(rows) == 120 * workers, f"{run}: {len(rows)} rows, expected {120 * workers}")
        trace = json.load(open(os.path.join(d, "trace.json")))
        tracks = {e["tid"] for e in trace["traceEvents"] if e.get("ph") == "X"}
        check(tracks == set(range(workers)), f"{run}: one trace track per rank, got {tracks}")
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

    # A rank killed mid-run.
    launcher = subprocess.Popen([gradsync, "run", preset, "--output", out, "--only", "allreduce-3",
                                 "--set", "train.steps=100000", "--set", "comm.timeout_s=10"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kill_one_and_check_teardown(check, launcher, expected=3,
                                pick=lambda procs: sorted(p for p, _ in procs)[1],
                                settle_s=1.5, bound_s=15)

check.finish()
