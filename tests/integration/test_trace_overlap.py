"""trace.json shows overlap as it happened: `gradsync run` of allreduce-2 with several buckets.

With comm.overlap on, at least one bucket's "allreduce" span on a rank's communication track
starts before that rank's "compute" span (forward and backward) of the same step ends: the
spans carry real start and end times, not durations laid end to end. With overlap off, none
does. Both ranks' processes are in the merged file, each with its compute and communication
tracks, and their spans share one time axis (the same step starts within a few ms on both).
"""
import json
import os
import sys
import tempfile
from collections import defaultdict

from checks import Checks, run_preset

gradsync, preset = sys.argv[1], sys.argv[2]
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
check.finish()
