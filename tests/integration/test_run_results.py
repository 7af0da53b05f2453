"""`gradsync run` on a small preset writes a complete, consistent results folder per run."""
import csv
import json
import os
import subprocess
import sys
import tempfile

from checks import Checks, run_preset

gradsync, preset = sys.argv[1], sys.argv[2]
check = Checks()


with tempfile.TemporaryDirectory() as out:
    proc, top = run_preset(check, gradsync, preset, out, timeout=150)
    check("| dp-3 |" in proc.stdout, "the comparison table lists every run")
    check(os.path.isdir(top), "results/latest points at the preset's folder")
    check(os.path.isfile(os.path.join(top, "comparison.md")), "comparison.md written")
    for run, workers in [("single", 1), ("dp-2", 2), ("dp-3", 3)]:
        d = os.path.join(top, run)
        for name in ["config.yaml", "metrics.csv", "summary.json", "trace.json"]:
            check(os.path.isfile(os.path.join(d, name)), f"{run}/{name} exists")
        summary = json.load(open(os.path.join(d, "summary.json")))
        steps = summary["steps"]
        check(summary["workers"] == workers, f"{run}: workers recorded")
        check(summary["global_batch"] == 48, f"{run}: global batch is 48")
        check(steps == 3 * (4096 // 48), f"{run}: 3 epochs of steps, got {steps}")
        check(summary["final_test_accuracy"] > 0.5, f"{run}: learned the task "
              f"({summary['final_test_accuracy']:.3f})")
        check(summary["time_to_accuracy_s"] is not None, f"{run}: reached the target")
        check(summary["samples_per_s"] > 0, f"{run}: throughput recorded")
        rows = list(csv.DictReader(open(os.path.join(d, "metrics.csv"))))
        check(len(rows) == steps * workers, f"{run}: one metrics row per rank per step "
              f"({len(rows)} != {steps * workers})")
        ranks = {int(r["rank"]) for r in rows}
        check(ranks == set(range(workers)), f"{run}: rows for every rank")
        sent = sum(int(r["bytes_sent"]) for r in rows if r["rank"] == "0")
        if workers == 1:
            check(sent == 0, f"{run}: single moves no bytes")
        else:
            model_bytes = 4 * (32 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10)
            check(sent == steps * (workers - 1) * model_bytes,
                  f"{run}: replica 0 sends (N-1) models per step")
            check(summary["busiest_node"]["name"] == "replica 0", f"{run}: replica 0 is the busiest")
        trace = json.load(open(os.path.join(d, "trace.json")))
        ranks = {e["pid"] for e in trace["traceEvents"] if e.get("ph") == "X"}
        check(ranks == set(range(workers)), f"{run}: one trace process per rank, got {ranks}")
        config_text = open(os.path.join(d, "config.yaml")).read()
        check(f"workers: {workers}" in config_text, f"{run}: config.yaml is the resolved config")
    # The plot script reads what gradsync writes, not a fixture of it.
    plotter = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "plots",
                           "plot_results.py")
    plots = subprocess.run(["/usr/bin/python3", plotter, top], capture_output=True, text=True,
                           timeout=120)
    check(plots.returncode == 0, f"plots of a real results folder: {plots.stderr.strip()}")
    check(os.path.isfile(os.path.join(top, "plots", "throughput.png")), "throughput.png written")

check.finish()
