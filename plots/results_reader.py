"""Reads a gradsync results folder: summary.json, metrics.csv and trace.json per run, and a
sweep's sweep.csv. Every problem with a file is a PlotError naming it."""
import csv
import json
import os
import sys

import numpy as np

# The columns this script reads, in metrics.csv's order; later columns (staleness, ...) are
# allowed, so a newer gradsync's results still plot.
METRIC_COLUMNS = ["step", "rank", "epoch", "time_s", "loss", "compute_s",
                  "communicate_s", "wait_s", "bytes_sent", "bytes_received"]
SUMMARY_KEYS = ["samples_per_s", "mean_step_s"]
PHASES = ["compute", "communicate", "wait"]

# sweep.csv's columns (`gradsync sweep`), each with how its value is read. Looked up by name,
# so a later gradsync may add columns.
SWEEP_COLUMNS = {
    "run": "text", "strategy": "text", "workers": "count", "servers": "int", "mode": "text",
    "link_gbps": "number", "parameters": "int", "global_batch": "int", "steps": "int",
    "samples_per_s": "number", "scaling_efficiency": "optional", "step_s": "number",
    "compute_s": "number", "communicate_s": "number", "wait_s": "number",
    "comm_share": "number", "busiest_node": "text", "busiest_bytes_per_step": "number",
}
# Columns a sweep.csv of an older gradsync lacks: read when present, else None.
# series: the preset run a row belongs to (rows of one run at each N).
SWEEP_OPTIONAL_COLUMNS = {"series": "text"}


class PlotError(Exception):
    pass


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
    """Returns (train_s, loss, step_s): arrays of the lowest rank (rank 0 when present), one per
    step, and every rank's step times, {rank: seconds per step in step order}.

    train_s is the training time at the end of each step: the rank's compute_s + communicate_s
    + wait_s summed over its steps so far. That is the clock of summary.json's evals[].time_s
    and time_to_accuracy_s (rank 0's step time summed, evaluation excluded; the three phases
    add up to the step within rounding), so the loss curve and the accuracy points can share an
    axis. metrics.csv's own time_s is wall time since the launcher started: it also holds
    process start-up, data loading, evaluations and checkpoints, which differ between
    strategies and would shift one run's curve against another's. A step time is the same sum
    of one row's phases: summary.json's step_time_s percentiles, to within rounding."""
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
                # (rank, step, step time, loss)
                rows.append((int(row[1]), int(row[0]),
                             float(row[5]) + float(row[6]) + float(row[7]), float(row[4])))
    except OSError as e:
        raise PlotError(f"{path}: {e.strerror}") from None
    except (ValueError, csv.Error) as e:  # UnicodeDecodeError is a ValueError
        raise PlotError(f"{path}:{reader.line_num}: {e}") from None
    if not rows:
        raise PlotError(f"{path}: no data rows")
    rank = min(r[0] for r in rows)
    # in step order, as the running sum needs
    mine = sorted(r[1:] for r in rows if r[0] == rank)
    by_rank = {}
    for r in sorted(rows):
        by_rank.setdefault(r[0], []).append(r[2])
    step_s = {r: np.array(times) for r, times in by_rank.items()}
    return np.cumsum([m[1] for m in mine]), np.array([m[2] for m in mine]), step_s


def load_trace(path):
    """Returns (spans, track labels); spans are (track, name, step, ts_us, dur_us).

    A track is pid * 16 + tid: a rank's (or a shard's) process holds its compute and
    communication tracks (shards: receive, apply, reply), labelled by their thread_name."""
    doc = read_json(path)
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise PlotError(f"{path}: no traceEvents list")
    spans, labels = [], {}
    try:
        for e in events:
            if e.get("ph") == "M" and e.get("name") == "thread_name":
                labels[int(e.get("pid", 0)) * 16 + int(e["tid"])] = str(e["args"]["name"])
            elif e.get("ph") == "X":
                track = int(e.get("pid", 0)) * 16 + int(e["tid"])
                spans.append((track, str(e["name"]), int(e.get("args", {}).get("step", 0)),
                              float(e["ts"]), float(e["dur"])))
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise PlotError(f"{path}: bad trace event ({e!r})") from None
    return spans, labels


def load_run(folder):
    summary = load_summary(os.path.join(folder, "summary.json"))
    base = os.path.basename(os.path.normpath(folder))
    run = {"name": str(summary.get("run") or base), "folder": base, "summary": summary,
           "color": None, "timeline": True}
    run["train_s"], run["loss"], run["step_s"] = load_metrics(os.path.join(folder, "metrics.csv"))
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
                for column in SWEEP_OPTIONAL_COLUMNS:
                    row[column] = (fields[header.index(column)].strip() or None
                                   if column in header else None)
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
