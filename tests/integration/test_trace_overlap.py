"""trace.json shows overlap as it happened: `gradsync run` of allreduce-2 with several buckets.

With comm.overlap on, at least one bucket's "allreduce" span on a rank's communication track
starts before that rank's "compute" span (forward and backward) of the same step ends: the
spans carry real start and end times, not durations laid end to end. With overlap off, none
does. Both ranks' processes are in the merged file, each with its compute and communication
tracks, and their spans share one time axis (the same step starts within a few ms on both).

ps-2 (two workers, two shards, sync): each shard is a process with receive, apply and reply
tracks; every traced step of every worker has a receive span on each shard, joined to the
worker's push_pull span by an arrow (a flow start and end with the same id), and a shard
receives a step's push only after the worker began it.

plots/plot_trace.py draws the overlap run's trace as a PNG (the README's picture), and says in
one line, exiting non-zero, when there is no trace.
"""
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict

from checks import Checks, run_preset

gradsync, preset = sys.argv[1], sys.argv[2]
PLOT_TRACE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "plots",
                          "plot_trace.py")
check = Checks()


def spans_by_rank_step(events, name, tid):
    out = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e["name"] == name and e["tid"] == tid:
            out[(e["pid"], e["args"]["step"])].append((e["ts"], e["ts"] + e["dur"]))
    return out


with tempfile.TemporaryDirectory() as out:
    proc, top = run_preset(check, gradsync, preset, out, timeout=180)
    early = {}
    for run in ["overlap-on", "overlap-off"]:
        # comm.backend auto, every rank on this host and no emulated link: shared memory.
        backend = json.load(open(os.path.join(top, run, "summary.json")))["backend"]
        check(backend == "shm", f"{run}: auto chose shm for ranks of one host, not {backend!r}")
        events = json.load(open(os.path.join(top, run, "trace.json")))["traceEvents"]
        names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e["name"] == "thread_name"}
        check(names == {(0, 0): "rank 0 compute", (0, 1): "rank 0 communication",
                        (1, 0): "rank 1 compute", (1, 1): "rank 1 communication"},
              f"{run}: each rank's compute and communication tracks: {names}")
        compute = spans_by_rank_step(events, "compute", 0)
        reduces = spans_by_rank_step(events, "allreduce", 1)
        per_step = [len(v) for v in reduces.values()]
        check(len(compute) == 24 and per_step and min(per_step) >= 3,
              f"{run}: 12 steps of 2 ranks, each with 3 or more bucket all-reduces "
              f"({len(compute)} compute spans, buckets per step {sorted(set(per_step))})")
        # A bucket that began before backward ended, per (rank, step).
        early[run] = sum(1 for key, (span,) in compute.items()
                         if any(begin < span[1] for begin, _ in reduces.get(key, [])))
        # One time axis: a step's compute starts at about the same time on both ranks.
        skew = max(abs(compute[(0, s)][0][0] - compute[(1, s)][0][0]) for s in range(12))
        check(skew < 50e3, f"{run}: ranks' clocks aligned (step starts differ by {skew:.0f} us)")
    check(early["overlap-on"] >= 1,
          f"overlap on: an all-reduce span starts before its step's backward ends "
          f"({early['overlap-on']} of 24 rank-steps)")
    check(early["overlap-off"] == 0,
          f"overlap off: no all-reduce span starts before its step's backward ends "
          f"({early['overlap-off']} do)")
    events = json.load(open(os.path.join(top, "ps-2", "trace.json")))["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e["name"] == "thread_name"}
    for shard in range(2):
        for tid, track in enumerate(["receive", "apply", "reply"]):
            check(names.get((1000 + shard, tid)) == f"shard {shard} {track}",
                  f"ps-2: shard {shard} has its {track} track: {names}")
    spans = [e for e in events if e.get("ph") == "X"]
    pushes = {(e["pid"], e["args"]["index"], e["args"]["step"]): e for e in spans
              if e["name"] == "push_pull"}
    receives = {(e["args"]["worker"], e["pid"] - 1000, e["args"]["step"]): e for e in spans
                if e["name"] == "receive"}
    check(len(pushes) == 2 * 2 * 12 and set(pushes) == set(receives),
          f"ps-2: a push_pull span per worker, shard and step ({len(pushes)}), and a receive "
          f"span for each on its shard ({len(receives)})")
    late = [k for k in pushes if k in receives and receives[k]["ts"] < pushes[k]["ts"] - 2e3]
    check(late == [], f"ps-2: no shard receives a push before the worker began it: {late[:3]}")
    starts = {e["id"]: (e["pid"], e["tid"]) for e in events if e.get("ph") == "s"}
    ends = {e["id"]: (e["pid"], e["tid"]) for e in events if e.get("ph") == "f"}
    joined = [i for i in starts if i in ends and starts[i][0] < 1000 <= ends[i][0]]
    check(len(starts) == len(pushes) and len(joined) == len(starts),
          f"ps-2: every push's arrow ends on a shard ({len(joined)} of {len(starts)})")
    applies = [e for e in spans if e["name"] == "apply"]
    check(len(applies) >= 2 * 12, f"ps-2: each shard applies every step ({len(applies)} spans)")

    png = os.path.join(out, "trace.png")
    drawn = subprocess.run(["/usr/bin/python3", PLOT_TRACE, os.path.join(top, "overlap-on"), png,
                            "--steps", "2"], capture_output=True, text=True, timeout=120)
    check(drawn.returncode == 0 and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
          and os.path.getsize(png) > 10000, f"plot_trace.py drew the trace: {drawn.stderr[-300:]}")
    missing = subprocess.run(["/usr/bin/python3", PLOT_TRACE, os.path.join(out, "none"), png],
                             capture_output=True, text=True, timeout=60)
    check(missing.returncode != 0 and len(missing.stderr.strip().splitlines()) == 1
          and "none" in missing.stderr, f"no trace: one line naming it: {missing.stderr!r}")
check.finish()
