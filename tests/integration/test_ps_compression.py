"""comm.compression on parameter-server pushes, under `gradsync run` (2 workers, 2 shards):

1. Bytes per step, exactly, per rank: before comm.compression_start_step every run pushes fp32;
   from it on fp16 and bf16 push 2 bytes a parameter (half of none's payload), top-k 8 bytes
   per entry, k = ceil(ratio * keys) of each shard's range (one chunk here); the pulls, the
   parameters coming back, stay fp32: the same bytes received as none, every step.
2. The warm-up is uncompressed: every run's loss equals none's up to and including the first
   compressed step (its gradient was computed on parameters of fp32 pushes).
3. Through a shard, pushes halved and pulls unchanged are about 3/4 of none's bytes (fp16,
   bf16); fp16 and bf16 end within 2% test accuracy of none, and top-k within 5%.
"""
import csv
import json
import math
import os
import sys
import tempfile

from checks import Checks, run_preset

gradsync, preset = sys.argv[1], sys.argv[2]
check = Checks()
START, RATIO, SHARDS = 5, 0.1, 2  # the preset's comm.compression_start_step, topk_ratio, servers
HEADER = 48
runs = ["none", "fp16", "bf16", "topk"]


def rows_of(top, run):
    """{(step, rank): row} of a run's metrics.csv."""
    path = os.path.join(top, run, "metrics.csv")
    return {(int(r["step"]), int(r["rank"])): r for r in csv.DictReader(open(path))}


with tempfile.TemporaryDirectory() as out:
    proc, top = run_preset(check, gradsync, preset, out, timeout=240)
    if proc.returncode != 0:
        check.finish()  # the failure is reported; there are no results to read
    s = {run: json.load(open(os.path.join(top, run, "summary.json"))) for run in runs}
    m = {run: rows_of(top, run) for run in runs}
    params = s["none"]["parameters"]
    # balanced_ranges: the first params % K shards one key more; each range one chunk here.
    ranges = [params // SHARDS + (1 if k < params % SHARDS else 0) for k in range(SHARDS)]
    headers = HEADER * SHARDS
    check(all(r < (1 << 17) for r in ranges), f"one chunk per shard: ranges {ranges}")
    top_k = sum(math.ceil(RATIO * r - RATIO * r * 1e-12) for r in ranges)
    expected = {"none": headers + 4 * params, "fp16": headers + 2 * params,
                "bf16": headers + 2 * params, "topk": headers + 8 * top_k}
    for run in runs:
        wrong = []
        for (step, rank), row in m[run].items():
            sent, received = int(row["bytes_sent"]), int(row["bytes_received"])
            want = expected["none"] if step < START else expected[run]
            if sent != want or received != headers + 4 * params:
                wrong.append((step, rank, sent, received))
        check(len(m[run]) == 2 * 60 and not wrong,
              f"{run}: {expected[run]} bytes pushed a step from step {START}, "
              f"{headers + 4 * params} pulled; wrong: {wrong[:4]}")
        same = all(m[run][(t, r)]["loss"] == m["none"][(t, r)]["loss"]
                   for t in range(START + 1) for r in range(2))
        check(same, f"{run}: the loss of steps 0..{START} is none's (fp32 warm-up)")
    later = any(m["topk"][(t, r)]["loss"] != m["none"][(t, r)]["loss"]
                for t in range(START + 1, 60) for r in range(2))
    check(later, "topk: the loss departs from none's after the warm-up")
    moved = {run: s[run]["busiest_node"]["bytes"] / s["none"]["busiest_node"]["bytes"]
             for run in runs}
    for run in ["fp16", "bf16"]:
        check(0.7 <= moved[run] <= 0.8, f"{run}: {moved[run]:.3f} of none's bytes through a shard")
    check(moved["topk"] < 0.7, f"topk: {moved['topk']:.3f} of none's bytes through a shard")
    for run, gap in [("fp16", 0.02), ("bf16", 0.02), ("topk", 0.05)]:
        diff = abs(s[run]["final_test_accuracy"] - s["none"]["final_test_accuracy"])
        check(diff <= gap, f"{run}: test accuracy within {gap:.0%} of none ({diff:.4f})")
check.finish()
