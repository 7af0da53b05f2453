#!/usr/bin/python3
"""Bus bandwidth against message size from `gradsync bench allreduce --json` documents.

One line per backend and rank count (out of place solid, in place dashed), size on a log2 axis,
as nccl-tests' users plot it. Several documents (N = 2 and N = 4, say) share one figure.

Usage: plot_busbw.py OUT.png BENCH.json [BENCH.json ...]
Exit 0 and the PNG's path on stdout; 2 with one line on stderr for a file that is not the
bench's JSON (naming the file and what is missing).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

from plot_style import save, series_colors  # noqa: E402


def human_size(size, _position=None):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g}{unit}"
    return f"{size:g}"


def fail(message):
    print(f"plot_busbw: error: {message}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    if doc.get("program") != "gradsync bench allreduce" or "results" not in doc:
        fail(f"{path}: not the JSON of `gradsync bench allreduce --json` (no program/results)")
    ranks = doc.get("parameters", {}).get("ranks")
    op = doc.get("parameters", {}).get("op", "allreduce")
    series = {}
    for row in doc["results"]:
        for place in ("out_of_place", "in_place"):
            bw = row.get(place, {}).get("bus_bw")
            if bw is not None:  # null: a NaN or a row that did not run
                series.setdefault((row["backend"], place), []).append((row["size"], bw))
    return op, ranks, series


def main(argv):
    if len(argv) < 3:
        fail("usage: plot_busbw.py OUT.png BENCH.json [BENCH.json ...]")
    out, paths = argv[1], argv[2:]
    lines = []
    ops = set()
    for path in paths:
        op, ranks, series = load(path)
        ops.add(op)
        for (backend, place), points in sorted(series.items()):
            lines.append((f"{backend} N={ranks}", place, sorted(points)))
    labels = sorted({label for label, _, _ in lines})
    colors = dict(zip(labels, series_colors(len(labels))))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, place, points in lines:
        sizes, bws = zip(*points)
        ax.plot(sizes, bws, marker="o", markersize=3, color=colors[label],
                linestyle="-" if place == "out_of_place" else "--",
                label=f"{label} ({'out of place' if place == 'out_of_place' else 'in place'})")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(human_size))
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(f"{'/'.join(sorted(ops))}: bus bandwidth against size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, out)


if __name__ == "__main__":
    main(sys.argv)
