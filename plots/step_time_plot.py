"""step_times.png: each run's step-time distribution, one box per run over every step of every
rank (metrics.csv: compute_s + communicate_s + wait_s). The box spans p25 to p75 with a line at
p50, the whiskers reach p1 and p99, and the steps beyond them are dots; p50 and p99 are written
beside each box. Percentiles follow the nearest-rank rule, as summary.json's step_time_s does.
In a run of several ranks a cross marks its slowest rank's own p99 (summary.json's
slowest_rank, else the highest p99 of metrics.csv's ranks): far right of the box, one rank lags
the others. The axis turns logarithmic when the runs' steps span more than 20x."""
import math
import os

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from plot_style import save
from run_plots import run_colors

# Past this ratio of the longest step to the shortest, a linear axis squeezes the fast runs'
# boxes into a few pixels.
LOG_SPREAD = 20


def nearest_rank(sorted_values, q):
    """The smallest value with at least q of the values at or below it (worker/summary.cpp)."""
    n = len(sorted_values)
    return float(sorted_values[min(n, max(1, math.ceil(q * n))) - 1])


def box_stats(step_s, label):
    """matplotlib's bxp() statistics of one run's steps (seconds in, ms out), nearest-rank."""
    ms = np.sort(np.concatenate([np.asarray(v, dtype=float) for v in step_s.values()])) * 1e3
    q = {p: nearest_rank(ms, p / 100) for p in (1, 25, 50, 75, 99)}
    fliers = ms[(ms < q[1]) | (ms > q[99])]
    return {"label": label, "med": q[50], "q1": q[25], "q3": q[75], "whislo": q[1],
            "whishi": q[99], "fliers": fliers, "p99": q[99], "min": ms[0], "max": ms[-1]}


def slowest_rank(run):
    """(rank, p99 in ms) of the run's slowest rank, or None for a run of one rank. The rank is
    the one summary.json names; its p99 is taken from metrics.csv, as the box is: the workers
    time a step as a whole, the rows as the sum of its phases, and the two differ slightly."""
    p99 = {r: nearest_rank(np.sort(v), 0.99) * 1e3 for r, v in run["step_s"].items() if len(v)}
    if len(p99) < 2:
        return None
    named = run["summary"].get("slowest_rank")
    if isinstance(named, dict) and named.get("rank") in p99:
        return named["rank"], p99[named["rank"]]
    rank = max(sorted(p99), key=lambda r: p99[r])  # the first of equals, as summary.json's
    return rank, p99[rank]


def plot_step_times(runs, out):
    stats = [box_stats(run["step_s"], run["name"]) for run in runs]
    fig, ax = plt.subplots(figsize=(9, max(3, 1.4 + 0.55 * len(runs))))
    colors = run_colors(runs)
    boxes = ax.bxp(stats, vert=False, patch_artist=True, showfliers=True, widths=0.6,
                   medianprops={"color": "black", "lw": 1.5},
                   flierprops={"marker": ".", "ms": 4, "alpha": 0.6, "mec": "none"})
    for patch, flier, color in zip(boxes["boxes"], boxes["fliers"], colors):
        patch.set(facecolor=color, alpha=0.6)
        flier.set(markerfacecolor=color)
    low = min(s["min"] for s in stats)
    high = max(s["max"] for s in stats)
    if low > 0 and high / low > LOG_SPREAD:
        ax.set_xscale("log")
        # Milliseconds as numbers (2, 5, 10, 20...), not powers of ten.
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    marked = False
    for y, (run, s) in enumerate(zip(runs, stats), start=1):
        slow = slowest_rank(run)
        if slow is not None:
            ax.plot(slow[1], y, "x", color="tab:red", ms=8, mew=2,
                    label=None if marked else "slowest rank's p99")
            marked = True
        text = f"p50 {s['med']:.3g} ms, p99 {s['p99']:.3g} ms"
        if slow is not None:
            text += f", slowest rank {slow[0]}"
        ax.annotate(text, xy=(1.01, y), xycoords=("axes fraction", "data"), va="center",
                    fontsize="small")
    ax.invert_yaxis()  # the first run on top, as in the comparison table
    ax.set(title="Step time per run, every rank's steps: box p25-p75, line p50, whiskers p1-p99",
           xlabel="step time (ms)")
    ax.grid(axis="x", which="both", alpha=0.3)
    if marked:
        ax.legend(loc="best", fontsize="small")
    save(fig, os.path.join(out, "step_times.png"))
