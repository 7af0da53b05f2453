#!/usr/bin/python3
"""Turn a gradsync results folder (one run, or a comparison of runs) into PNGs.

Usage: plot_results.py RESULTS_DIR [--out DIR]

Every folder gets loss_vs_time.png, throughput.png, step_breakdown.png and timeline_<run>.png.
A sweep folder (`gradsync sweep PRESET`: sweep.csv plus one run folder per grid point) also
gets, one line per series (strategy, ps shards K, ps mode) against the worker count N:
scaling_throughput.png (samples/s, with each series' ideal linear scaling from its smallest
N), busiest_node_bytes.png (MiB per step through the node that moves the most) and
comm_share.png (communicate + wait share of the step). In a sweep only the largest-N run of
each series gets a timeline.
"""
import argparse
import csv
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullLocator  # noqa: E402
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
# More runs than this in one plot: legends move outside the axes, bar labels turn.
MANY_RUNS = 6

# sweep.csv's columns (`gradsync sweep`), each with how its value is read. Looked up by name,
# so a later gradsync may add columns.
SWEEP_COLUMNS = {
    "run": "text", "strategy": "text", "workers": "count", "servers": "int", "mode": "text",
    "link_gbps": "number", "parameters": "int", "global_batch": "int", "steps": "int",
    "samples_per_s": "number", "scaling_efficiency": "optional", "step_s": "number",
    "compute_s": "number", "communicate_s": "number", "wait_s": "number",
    "comm_share": "number", "busiest_node": "text", "busiest_bytes_per_step": "number",
}
SERIES_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


class PlotError(Exception):
    pass


# ---------------------------------------------------------------- loading

def find_runs(root, allow_none=False):
    if not os.path.isdir(root):
        raise PlotError(f"{root}: not a directory")
    if os.path.isfile(os.path.join(root, "summary.json")):
        return [root]
    runs = [os.path.join(root, d) for d in sorted(os.listdir(root))
            if os.path.isfile(os.path.join(root, d, "summary.json"))]
    if not runs and not allow_none:
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
    base = os.path.basename(os.path.normpath(folder))
    run = {"name": str(summary.get("run") or base), "folder": base, "summary": summary,
           "color": None, "timeline": True}
    run["time"], run["loss"] = load_metrics(os.path.join(folder, "metrics.csv"))
    trace = os.path.join(folder, "trace.json")
    run["trace"] = None
    if os.path.exists(trace):
        run["trace"] = load_trace(trace)
    else:
        print(f"plot_results.py: warning: {trace} missing, no timeline", file=sys.stderr)
    return run


def parse_sweep_value(kind, text):
    """sweep.csv field -> value; ValueError with the reason when it is not of its kind."""
    if kind == "text":
        return text
    if kind == "optional" and text == "":
        return None
    if kind in ("int", "count"):
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not an integer") from None
        if value < (1 if kind == "count" else 0):
            raise ValueError(f"{value} is below {1 if kind == 'count' else 0}")
        return value
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not np.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


def load_sweep(path):
    """sweep.csv -> list of row dicts (values parsed per SWEEP_COLUMNS)."""
    rows = []
    try:
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                raise PlotError(f"{path}: empty, expected a header")
            missing = [c for c in SWEEP_COLUMNS if c not in header]
            if missing:
                raise PlotError(f"{path}: header lacks column(s) {', '.join(missing)}")
            index = {c: header.index(c) for c in SWEEP_COLUMNS}
            for fields in reader:
                where = f"{path}:{reader.line_num}"
                if not fields:
                    continue
                if len(fields) != len(header):
                    raise PlotError(f"{where}: expected {len(header)} fields, got {len(fields)}")
                row = {}
                for column, kind in SWEEP_COLUMNS.items():
                    try:
                        row[column] = parse_sweep_value(kind, fields[index[column]].strip())
                    except ValueError as e:
                        raise PlotError(f"{where}: column {column}: {e}") from None
                if not row["strategy"]:
                    raise PlotError(f"{where}: column strategy: empty")
                rows.append(row)
    except OSError as e:
        raise PlotError(f"{path}: {e.strerror}") from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise PlotError(f"{path}: {e}") from None
    if not rows:
        raise PlotError(f"{path}: no data rows")
    return rows


def human_count(n):
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:g}"


def sweep_series(rows):
    """Groups the rows into series: [(label, rows by increasing N)], in order of first
    appearance. A series is (strategy, ps shards, ps mode); link cap and model size join the
    key only when the sweep varies them."""
    varies = {c: len({r[c] for r in rows}) > 1 for c in ("link_gbps", "parameters")}
    series = {}
    for row in rows:
        key = (row["strategy"], row["servers"], row["mode"],
               row["link_gbps"] if varies["link_gbps"] else None,
               row["parameters"] if varies["parameters"] else None)
        series.setdefault(key, []).append(row)
    out = []
    for (strategy, servers, mode, link, params), members in series.items():
        parts = [strategy]
        if strategy == "ps" or servers:
            parts.append(f"K={servers}")
        if mode:
            parts.append(mode)
        extras = []
        if link is not None:
            extras.append(f"{link:g} Gbit/s" if link > 0 else "no link cap")
        if params is not None:
            extras.append(f"{human_count(params)} params")
        label = ", ".join([" ".join(parts)] + extras)
        out.append((label, sorted(members, key=lambda r: r["workers"])))
    return out


def sweep_title(what, rows):
    """'<what>: 1.2M-parameter model, links capped at 10 Gbit/s' (what the sweep holds fixed)."""
    notes = []
    params = {r["parameters"] for r in rows}
    if len(params) == 1:
        notes.append(f"{human_count(params.pop())}-parameter model")
    links = {r["link_gbps"] for r in rows}
    if len(links) == 1 and (link := links.pop()) > 0:
        notes.append(f"links capped at {link:g} Gbit/s")
    return f"{what}: {', '.join(notes)}" if notes else what


def series_colors(n):
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return [cycle[i % len(cycle)] for i in range(n)]


def arrange_sweep_runs(runs, series):
    """Orders the sweep's run folders by series then N, colours each run in its series' colour
    (lighter for smaller N), and keeps the timeline of only the largest-N run per series.

    A sweep has series x N runs (12 or more); a timeline each would be that many near-repeats.
    The largest N of a series is where its synchronisation contends the most, so that one is
    drawn: one timeline per series, bounded however wide the grid. Run folders that sweep.csv
    does not list (left over, renamed) keep their timeline and sort last."""
    place = {}
    for s, ((_, members), color) in enumerate(zip(series, series_colors(len(series)))):
        for i, row in enumerate(members):
            # smallest N at 45% strength, largest at full colour
            mix = 0.45 + 0.55 * (i / (len(members) - 1) if len(members) > 1 else 1.0)
            shade = mcolors.to_rgb(color)
            shade = tuple(1 - mix * (1 - c) for c in shade)
            place[row["run"]] = (s, row["workers"], shade)
    for run in runs:
        key = run["folder"] if run["folder"] in place else run["name"]
        if key in place:
            run["sweep"] = place[key][:2]
            run["color"] = place[key][2]
    runs.sort(key=lambda r: r.get("sweep", (len(series), 0)))
    largest = {}
    for run in runs:
        if "sweep" in run:
            run["timeline"] = False
            largest[run["sweep"][0]] = run  # sorted by N, so the last one wins
    for run in largest.values():
        run["timeline"] = True


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
    """A sweep's runs carry their series' colour; others take the colour cycle in turn."""
    return [run["color"] or default for run, default in zip(runs, series_colors(len(runs)))]


def run_bar_axis(ax, runs):
    """Many bars: turn the run names so they stay readable."""
    if len(runs) > MANY_RUNS:
        plt.setp(ax.get_xticklabels(), rotation=40, ha="right")


def bar_figure(runs):
    per_bar = 1.2 if len(runs) <= MANY_RUNS else 0.65
    return plt.subplots(figsize=(max(5, per_bar * len(runs) + 2), 4.5))


def plot_loss(runs, out):
    fig, (ax_loss, ax_acc) = plt.subplots(2, 1, figsize=(9, 7), sharex=True,
                                          gridspec_kw={"height_ratios": [2, 1]})
    many = len(runs) > MANY_RUNS
    windows = [int(np.clip(len(run["loss"]) // 50, 1, 200)) for run in runs]
    same_window = len(set(windows)) == 1
    for run, color, window in zip(runs, run_colors(runs), windows):
        x, y = moving_average(run["time"], run["loss"], window)
        label = run["name"] if same_window else f"{run['name']} (avg of {window} steps)"
        ax_loss.plot(x, y, color=color, label=label)
        evals = run["summary"]["evals"]
        if evals:
            t, acc = zip(*evals)
            # many runs: the loss legend names the colours once, for both panels
            ax_acc.plot(t, acc, "o-", color=color, ms=3 if many else 6,
                        label=None if many else run["name"])
    targets = {r["summary"].get("target_accuracy") for r in runs} - {None}
    for target in targets:
        ax_acc.axhline(target, color="grey", ls="--", lw=1, label=f"target {target:g}")
    ylabel = f"training loss (avg of {windows[0]} steps)" if same_window else "training loss"
    ax_loss.set(title="Training loss (rank 0) and test accuracy", ylabel=ylabel)
    ax_loss.grid(alpha=0.3)
    if many:
        ax_loss.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small",
                       ncol=2 if len(runs) > 20 else 1)
    else:
        ax_loss.legend()
    ax_acc.set(xlabel="time since start (s)", ylabel="test accuracy")
    ax_acc.grid(alpha=0.3)
    if ax_acc.get_legend_handles_labels()[0]:
        ax_acc.legend(loc="lower right")
    save(fig, os.path.join(out, "loss_vs_time.png"))


def plot_throughput(runs, out):
    names = [r["name"] for r in runs]
    values = [r["summary"]["samples_per_s"] for r in runs]
    fig, ax = bar_figure(runs)
    bars = ax.bar(names, values, color=run_colors(runs))
    many = len(runs) > MANY_RUNS
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=3,
                 fontsize="small" if many else None, rotation=90 if many else 0)
    ax.set(title="Training throughput", ylabel="samples/s", xlabel="run")
    ax.set_ylim(0, max(values + [1]) * (1.3 if many else 1.15))
    ax.grid(axis="y", alpha=0.3)
    run_bar_axis(ax, runs)
    save(fig, os.path.join(out, "throughput.png"))


def plot_breakdown(runs, out):
    names = [r["name"] for r in runs]
    bottom = np.zeros(len(runs))
    fig, ax = bar_figure(runs)
    for phase in PHASES:
        ms = np.array([r["summary"]["mean_step_s"][phase] * 1e3 for r in runs])
        ax.bar(names, ms, bottom=bottom, color=PHASE_COLORS[phase], label=phase)
        bottom += ms
    ax.set(title="Mean time per step", ylabel="ms per step", xlabel="run")
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    run_bar_axis(ax, runs)
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


def sweep_axes(ax, rows, ylabel):
    """log2 N axis with a tick at each N of the sweep."""
    ns = sorted({r["workers"] for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.xaxis.set_minor_locator(NullLocator())
    if len(ns) == 1:
        ax.set_xlim(ns[0] / 1.5, ns[0] * 1.5)
    ax.set(xlabel="workers N", ylabel=ylabel)
    ax.grid(alpha=0.3)


def plot_series(ax, series, y, **kwargs):
    """One line per series of y(row); returns the series' colours."""
    colors = series_colors(len(series))
    for i, ((label, members), color) in enumerate(zip(series, colors)):
        ax.plot([r["workers"] for r in members], [y(r) for r in members],
                marker=SERIES_MARKERS[i % len(SERIES_MARKERS)], color=color, label=label, **kwargs)
    return colors


def sweep_legend(ax, series):
    if len(series) > MANY_RUNS:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    else:
        ax.legend(loc="upper left", fontsize="small")


def plot_sweep_throughput(rows, series, out):
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plot_series(ax, series, lambda r: r["samples_per_s"])
    scaled = [members for _, members in series if len(members) > 1]
    for (_, members), color in zip(series, colors):
        if len(members) < 2:
            continue  # a single N has no scaling to compare with
        n0, base = members[0]["workers"], members[0]["samples_per_s"]
        ns = [r["workers"] for r in members]
        ax.plot(ns, [base * n / n0 for n in ns], ls="--", lw=1, color=color, alpha=0.7)
        last = members[-1]
        ideal = base * last["workers"] / n0
        if ideal > 0:
            ax.annotate(f"{last['samples_per_s'] / ideal:.0%}", (last["workers"],
                        last["samples_per_s"]), xytext=(6, -3), textcoords="offset points",
                        fontsize="small", color=color)
    if scaled:
        ax.plot([], [], ls="--", lw=1, color="grey", label="ideal: own smallest-N rate × N/N0")
    sweep_axes(ax, rows, "samples/s")
    ax.set_ylim(bottom=0)
    ax.margins(x=0.12)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    note = "\n(% at the largest N: share of its ideal)" if scaled else ""
    ax.set_title(sweep_title("Throughput vs workers", rows) + note, fontsize="medium")
    sweep_legend(ax, series)
    save(fig, os.path.join(out, "scaling_throughput.png"))


def plot_sweep_busiest(rows, series, out):
    mib = 1024.0 ** 2
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plot_series(ax, series, lambda r: r["busiest_bytes_per_step"] / mib)
    # Name the busiest node at the largest N, and wherever it changes along the series.
    for (_, members), color in zip(series, colors):
        for i, row in enumerate(members):
            if i == len(members) - 1 or row["busiest_node"] != members[i + 1]["busiest_node"]:
                ax.annotate(row["busiest_node"], (row["workers"],
                            row["busiest_bytes_per_step"] / mib), xytext=(6, 2),
                            textcoords="offset points", fontsize="x-small", color=color)
    params = {r["parameters"] for r in rows}
    if len(params) == 1 and (model := params.pop() * 4 / mib) > 0:
        ax.axhline(model, color="grey", ls=":", lw=1, label=f"model size ({model:,.3g} MiB float32)")
    sweep_axes(ax, rows, "MiB sent + received per step")
    ax.set_ylim(bottom=0)
    ax.margins(x=0.12)
    ax.set_title(sweep_title("Bytes through the busiest node", rows), fontsize="medium")
    sweep_legend(ax, series)
    save(fig, os.path.join(out, "busiest_node_bytes.png"))


def plot_sweep_comm_share(rows, series, out):
    fig, ax = plt.subplots(figsize=(8, 5))
    plot_series(ax, series, lambda r: 100 * r["comm_share"])
    sweep_axes(ax, rows, "communicate + wait, % of the step")
    ax.set_ylim(0, 105)
    ax.set_title(sweep_title("Share of the step spent synchronising", rows), fontsize="medium")
    sweep_legend(ax, series)
    save(fig, os.path.join(out, "comm_share.png"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results_dir")
    parser.add_argument("--out", help="output folder (default RESULTS_DIR/plots)")
    args = parser.parse_args()
    try:
        sweep_csv = os.path.join(args.results_dir, "sweep.csv")
        rows = load_sweep(sweep_csv) if os.path.isfile(sweep_csv) else None
        series = sweep_series(rows) if rows else None
        runs = [load_run(folder)
                for folder in find_runs(args.results_dir, allow_none=rows is not None)]
        if series:
            arrange_sweep_runs(runs, series)
        out = args.out or os.path.join(args.results_dir, "plots")
        os.makedirs(out, exist_ok=True)
        if runs:
            plot_loss(runs, out)
            plot_throughput(runs, out)
            plot_breakdown(runs, out)
        for run in runs:
            if run["trace"] is not None and run["timeline"]:
                plot_timeline(run, out)
        if series:
            plot_sweep_throughput(rows, series, out)
            plot_sweep_busiest(rows, series, out)
            plot_sweep_comm_share(rows, series, out)
    except (PlotError, OSError) as e:
        print(f"plot_results.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
