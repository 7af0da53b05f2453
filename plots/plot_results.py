#!/usr/bin/python3
"""Turn a gradsync results folder (one run, or a comparison of runs) into PNGs.

Usage: plot_results.py RESULTS_DIR [--out DIR]
"""
import argparse
import csv
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

# The columns this script reads, in metrics.csv's order; later columns (staleness, ...) are
# allowed, so a newer gradsync's results still plot.
METRIC_COLUMNS = ["step", "rank", "epoch", "time_s", "loss", "compute_s",
                  "communicate_s", "wait_s", "bytes_sent", "bytes_received"]
SUMMARY_KEYS = ["samples_per_s", "mean_step_s"]
PHASES = ["compute", "communicate", "wait"]
PHASE_COLORS = {"compute": "tab:blue", "communicate": "tab:orange", "wait": "tab:red",
                "evaluate": "tab:green"}
KNOWN = list(PHASE_COLORS)
TIMELINE_STEPS = 20


class PlotError(Exception):
    pass


# ---------------------------------------------------------------- loading

def find_runs(root):
    if not os.path.isdir(root):
        raise PlotError(f"{root}: not a directory")
    if os.path.isfile(os.path.join(root, "summary.json")):
        return [root]
    runs = [os.path.join(root, d) for d in sorted(os.listdir(root))
            if os.path.isfile(os.path.join(root, d, "summary.json"))]
    if not runs:
        raise PlotError(f"{root}: no summary.json in it or in its subfolders")
    return runs


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PlotError(f"{path}: {e}") from None


def load_summary(path):
    summary = read_json(path)
    if not isinstance(summary, dict):
        raise PlotError(f"{path}: expected a JSON object")
    missing = [k for k in SUMMARY_KEYS if k not in summary]
    if missing:
        raise PlotError(f"{path}: missing key(s) {', '.join(missing)}")
    try:
        summary["samples_per_s"] = float(summary["samples_per_s"])
        summary["mean_step_s"] = {p: float(summary["mean_step_s"].get(p, 0.0)) for p in PHASES}
        summary["evals"] = [(float(e["time_s"]), float(e["test_accuracy"]))
                            for e in summary.get("evals") or []]
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise PlotError(f"{path}: bad value ({e!r})") from None
    return summary


def load_metrics(path):
    """Returns (time_s, loss) arrays of the lowest rank (rank 0 when present)."""
    rows = []
    try:
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None or header[:len(METRIC_COLUMNS)] != METRIC_COLUMNS:
                raise PlotError(f"{path}: header does not start with {','.join(METRIC_COLUMNS)}")
            for row in reader:
                if len(row) != len(header):
                    raise PlotError(f"{path}:{reader.line_num}: expected "
                                    f"{len(header)} fields, got {len(row)}")
                rows.append((int(row[1]), float(row[3]), float(row[4])))
    except OSError as e:
        raise PlotError(f"{path}: {e.strerror}") from None
    except ValueError as e:
        raise PlotError(f"{path}:{reader.line_num}: {e}") from None
    if not rows:
        raise PlotError(f"{path}: no data rows")
    rank = min(r[0] for r in rows)
    mine = sorted((t, loss) for r, t, loss in rows if r == rank)
    return np.array([m[0] for m in mine]), np.array([m[1] for m in mine])


def load_trace(path):
    """Returns (spans, rank labels); spans are (rank, name, step, ts_us, dur_us)."""
    doc = read_json(path)
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise PlotError(f"{path}: no traceEvents list")
    spans, labels = [], {}
    try:
        for e in events:
            if e.get("ph") == "M" and e.get("name") == "thread_name":
                labels[int(e["tid"])] = str(e["args"]["name"])
            elif e.get("ph") == "X":
                spans.append((int(e["tid"]), str(e["name"]), int(e.get("args", {}).get("step", 0)),
                              float(e["ts"]), float(e["dur"])))
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise PlotError(f"{path}: bad trace event ({e!r})") from None
    return spans, labels


def load_run(folder):
    summary = load_summary(os.path.join(folder, "summary.json"))
    run = {"name": str(summary.get("run") or os.path.basename(os.path.normpath(folder))),
           "summary": summary}
    run["time"], run["loss"] = load_metrics(os.path.join(folder, "metrics.csv"))
    trace = os.path.join(folder, "trace.json")
    run["trace"] = None
    if os.path.exists(trace):
        run["trace"] = load_trace(trace)
    else:
        print(f"plot_results.py: warning: {trace} missing, no timeline", file=sys.stderr)
    return run


# ---------------------------------------------------------------- plots

def moving_average(x, y, window):
    if len(y) < window or window <= 1:
        return x, y
    kernel = np.ones(window) / window
    return x[window - 1:], np.convolve(y, kernel, mode="valid")


def save(fig, path):
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    print(path)


def run_colors(runs):
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return [cycle[i % len(cycle)] for i in range(len(runs))]


def plot_loss(runs, out):
    fig, (ax_loss, ax_acc) = plt.subplots(2, 1, figsize=(9, 7), sharex=True,
                                          gridspec_kw={"height_ratios": [2, 1]})
    for run, color in zip(runs, run_colors(runs)):
        window = int(np.clip(len(run["loss"]) // 50, 1, 200))
        x, y = moving_average(run["time"], run["loss"], window)
        ax_loss.plot(x, y, color=color, label=f"{run['name']} (avg of {window} steps)")
        evals = run["summary"]["evals"]
        if evals:
            t, acc = zip(*evals)
            ax_acc.plot(t, acc, "o-", color=color, label=run["name"])
    targets = {r["summary"].get("target_accuracy") for r in runs} - {None}
    for target in targets:
        ax_acc.axhline(target, color="grey", ls="--", lw=1, label=f"target {target:g}")
    ax_loss.set(title="Training loss (rank 0) and test accuracy", ylabel="training loss")
    ax_loss.grid(alpha=0.3)
    ax_loss.legend()
    ax_acc.set(xlabel="time since start (s)", ylabel="test accuracy")
    ax_acc.grid(alpha=0.3)
    if ax_acc.has_data():
        ax_acc.legend(loc="lower right")
    save(fig, os.path.join(out, "loss_vs_time.png"))


def plot_throughput(runs, out):
    names = [r["name"] for r in runs]
    values = [r["summary"]["samples_per_s"] for r in runs]
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(runs) + 2), 4.5))
    bars = ax.bar(names, values, color=run_colors(runs))
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=3)
    ax.set(title="Training throughput", ylabel="samples/s", xlabel="run")
    ax.set_ylim(0, max(values + [1]) * 1.15)
    ax.grid(axis="y", alpha=0.3)
    save(fig, os.path.join(out, "throughput.png"))


def plot_breakdown(runs, out):
    names = [r["name"] for r in runs]
    bottom = np.zeros(len(runs))
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(runs) + 2), 4.5))
    for phase in PHASES:
        ms = np.array([r["summary"]["mean_step_s"][phase] * 1e3 for r in runs])
        ax.bar(names, ms, bottom=bottom, color=PHASE_COLORS[phase], label=phase)
        bottom += ms
    ax.set(title="Mean time per step", ylabel="ms per step", xlabel="run")
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    save(fig, os.path.join(out, "step_breakdown.png"))


def plot_timeline(run, out):
    spans, labels = run["trace"]
    if not spans:
        print(f"plot_results.py: warning: no spans in trace of {run['name']}", file=sys.stderr)
        return
    first = min(s[2] for s in spans)
    spans = [s for s in spans if s[2] < first + TIMELINE_STEPS]
    t0 = min(s[3] for s in spans)
    ranks = sorted({s[0] for s in spans})
    fig, ax = plt.subplots(figsize=(11, 1 + 0.6 * len(ranks)))
    extra = iter(c for c in plt.rcParams["axes.prop_cycle"].by_key()["color"]
                 if c not in PHASE_COLORS.values())
    names = sorted({s[1] for s in spans}, key=lambda n: (KNOWN.index(n) if n in KNOWN else len(KNOWN), n))
    colors = {n: PHASE_COLORS.get(n) or next(extra, "black") for n in names}
    for row, rank in enumerate(ranks):
        for name in names:
            bars = [((s[3] - t0) / 1e3, s[4] / 1e3) for s in spans
                    if s[0] == rank and s[1] == name]
            ax.broken_barh(bars, (row - 0.4, 0.8), color=colors[name])
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[n]) for n in names]
    ax.legend(handles, names, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_yticks(range(len(ranks)), [labels.get(r, f"rank {r}") for r in ranks])
    ax.invert_yaxis()
    ax.set(title=f"{run['name']}: steps {first}-{first + TIMELINE_STEPS - 1} per rank",
           xlabel="time since first span (ms)")
    ax.grid(axis="x", alpha=0.3)
    name = re.sub(r"[^A-Za-z0-9._-]", "_", run["name"])
    save(fig, os.path.join(out, f"timeline_{name}.png"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results_dir")
    parser.add_argument("--out", help="output folder (default RESULTS_DIR/plots)")
    args = parser.parse_args()
    try:
        runs = [load_run(folder) for folder in find_runs(args.results_dir)]
        out = args.out or os.path.join(args.results_dir, "plots")
        os.makedirs(out, exist_ok=True)
        plot_loss(runs, out)
        plot_throughput(runs, out)
        plot_breakdown(runs, out)
        for run in runs:
            if run["trace"] is not None:
                plot_timeline(run, out)
    except (PlotError, OSError) as e:
        print(f"plot_results.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
