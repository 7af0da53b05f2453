"""A sweep's plots against the worker count N, one line per series: scaling_throughput.png,
busiest_node_bytes.png and comm_share.png."""
import os

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, NullLocator

from plot_style import MANY_RUNS, save, series_colors
from sweep_grouping import sweep_title

SERIES_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


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
