#!/usr/bin/python3
"""`gradsync sweep` end to end: the grid runs, sweep.csv holds one row per run with the columns
the plot script reads, the emulated link shows in the bytes and times, and the plots come out.

Usage: test_sweep.py GRADSYNC PRESET
"""
import csv
import os
import subprocess
import sys
import tempfile

from checks import Checks

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLUMNS = ("run,strategy,workers,servers,mode,link_gbps,parameters,global_batch,steps,"
           "samples_per_s,scaling_efficiency,step_s,compute_s,communicate_s,wait_s,comm_share,"
           "busiest_node,busiest_bytes_per_step,series").split(",")


def main():
    gradsync, preset = sys.argv[1], sys.argv[2]
    check = Checks()
    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.run([gradsync, "sweep", preset, "--output", out], capture_output=True,
                              text=True, timeout=240)
        check(proc.returncode == 0, f"gradsync sweep exited {proc.returncode}: {proc.stderr[-3000:]}")
        root = os.path.realpath(os.path.join(out, "latest"))
        with open(os.path.join(root, "sweep.csv")) as f:
            reader = csv.DictReader(f)
            check(reader.fieldnames == COLUMNS, f"sweep.csv columns: {reader.fieldnames}")
            rows = {r["run"]: r for r in reader}
        expected = ["single", "dp-n1", "dp-n2", "ps-n1", "ps-n2", "ring-n1", "ring-n2"]
        check(sorted(rows) == sorted(expected), f"one row per grid point: {sorted(rows)}")
        for name in expected:
            check(os.path.isfile(os.path.join(root, name, "summary.json")),
                  f"{name} has its results folder")
        if sorted(rows) == sorted(expected):
            model_bytes = 250000 * 4
            per_step = {n: float(r["busiest_bytes_per_step"]) for n, r in rows.items()}
            # dp's replica 0 and a ring rank at N = 2 both move 2S a step; a ps shard serving
            # two workers moves 4S; N = 1 moves nothing but ps (the worker still talks to it).
            check(abs(per_step["dp-n2"] - 2 * model_bytes) < 0.01 * model_bytes,
                  f"dp N=2 busiest node moves 2S: {per_step['dp-n2']}")
            check(abs(per_step["ring-n2"] - 2 * model_bytes) < 0.05 * model_bytes,
                  f"ring N=2 moves 2S per rank: {per_step['ring-n2']}")
            check(per_step["ps-n2"] >= 4 * model_bytes and rows["ps-n2"]["busiest_node"] ==
                  "server 0", f"ps N=2: the shard moves 4S: {rows['ps-n2']}")
            check(per_step["ring-n1"] == 0 and per_step["dp-n1"] == 0, "N = 1 moves nothing")
            # At 0.4 Gbit/s (50 MB/s) replica 0 takes S in and sends S out, each direction with
            # the token bucket's 256 KiB burst banked during compute (common/link.h):
            # 2 (S - 256 KiB) / 50 MB/s = 29.5 ms a step. Without the cap it is under 5 ms.
            paced = 2 * (model_bytes - 256 * 1024) / 50e6
            dp_comm = float(rows["dp-n2"]["communicate_s"]) + float(rows["dp-n2"]["wait_s"])
            check(dp_comm > 0.8 * paced,
                  f"the emulated link paces dp: {dp_comm:.4f} s a step, paced {paced:.4f}")
            check(rows["ring-n2"]["scaling_efficiency"] != "", "scaling efficiency is filled in")
            check({n: r["series"] for n, r in rows.items()} ==
                  {n: n.rsplit("-n", 1)[0] for n in expected},
                  f"each row's series is its preset run: {[r['series'] for r in rows.values()]}")
        plot = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "plots", "plot_results.py"),
                               root], capture_output=True, text=True, timeout=120)
        check(plot.returncode == 0, f"plots: {plot.stderr[-2000:]}")
        for name in ("scaling_throughput.png", "busiest_node_bytes.png"):
            check(os.path.isfile(os.path.join(root, "plots", name)), f"plots/{name} written")
    check.finish()


if __name__ == "__main__":
    main()
