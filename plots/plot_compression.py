#!/usr/bin/python3
"""Test accuracy against bytes sent and against training time, one line a run: what the
compression preset (experiments/presets/compression.yaml) is read with.

Usage: plot_compression.py RESULTS_DIR [--out DIR]

Writes compression.png: left, test accuracy against the MiB rank 0 had sent by each evaluation
(metrics.csv's bytes_sent summed over its steps: the compressed bytes, as the communicator
counted them); right, against rank 0's training time (summary.json's evals[].time_s). Runs
without evaluations are left out, and named.
"""
import argparse
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from plot_style import save, series_colors  # noqa: E402
from results_reader import PlotError, find_runs, read_json  # noqa: E402


def bytes_by_step(path):
    """{step: bytes rank 0 had sent by the end of that step} from metrics.csv."""
    sent, total = {}, 0
    try:
        with open(path, newline="") as f:
            rows = [r for r in csv.DictReader(f) if r["rank"] == "0"]
    except (OSError, KeyError, csv.Error) as e:
        raise PlotError(f"{path}: {e}") from None
    for row in sorted(rows, key=lambda r: int(r["step"])):
        total += int(row["bytes_sent"])
        sent[int(row["step"])] = total
    return sent


def load(run_dir):
    summary = read_json(os.path.join(run_dir, "summary.json"))
    evals = summary.get("evals") or []
    sent = bytes_by_step(os.path.join(run_dir, "metrics.csv"))
    points = []
    for e in evals:
        # An evaluation after step s has seen steps 0..s-1.
        step = int(e["step"])
        before = max((s for s in sent if s < step), default=None)
        points.append((sent[before] / 2**20 if before is not None else 0.0,
                       float(e["time_s"]), float(e["test_accuracy"])))
    return summary.get("run", os.path.basename(run_dir)), points


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results_dir")
    parser.add_argument("--out", help="output folder (default RESULTS_DIR/plots)")
    args = parser.parse_args()
    try:
        runs = [load(d) for d in find_runs(args.results_dir)]
    except PlotError as e:
        print(f"plot_compression: {e}", file=sys.stderr)
        return 1
    plotted = [(name, points) for name, points in runs if points]
    for name, points in runs:
        if not points:
            print(f"plot_compression: {name}: no evaluations, left out", file=sys.stderr)
    if not plotted:
        print(f"plot_compression: {args.results_dir}: no run has evaluations", file=sys.stderr)
        return 1
    fig, (by_bytes, by_time) = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    # One colour a method (the run name's first part, "fp16" of "fp16-1g"), one line style a
    # variant of it (the rest: a link rate), so that a method's runs read as one family.
    methods = sorted({name.split("-")[0] for name, _ in plotted})
    variants = sorted({name.partition("-")[2] for name, _ in plotted})
    colors = dict(zip(methods, series_colors(len(methods))))
    styles = dict(zip(variants, ["-", "--", ":", "-."] * len(variants)))
    for name, points in plotted:
        color = colors[name.split("-")[0]]
        style = styles[name.partition("-")[2]]
        # An evaluation before any step sent nothing: no place on a log axis.
        mib, seconds, accuracy = zip(*[p for p in points if p[0] > 0] or points)
        by_bytes.plot(mib, accuracy, style, marker="o", ms=3, color=color, label=name)
        by_time.plot(seconds, accuracy, style, marker="o", ms=3, color=color, label=name)
    by_bytes.set_xscale("log")
    by_bytes.set_xlabel("MiB sent by rank 0 (compressed)")
    by_time.set_xlabel("training time, s (rank 0)")
    by_bytes.set_ylabel("test accuracy")
    for ax in (by_bytes, by_time):
        ax.grid(alpha=0.3)
    by_time.legend(loc="lower right", fontsize=8)
    out = args.out or os.path.join(args.results_dir, "plots")
    os.makedirs(out, exist_ok=True)
    save(fig, os.path.join(out, "compression.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
