"""timeline_<run>.png: the first TIMELINE_STEPS steps of a run's trace, one row per track: each
rank's compute and communication (overlapped all-reduces sit beside backward), each ps shard's
receive, apply and reply."""
import os
import re
import sys

import matplotlib.pyplot as plt

from plot_style import PHASE_COLORS, save

KNOWN = list(PHASE_COLORS)
TIMELINE_STEPS = 20


def plot_timeline(run, out, steps=TIMELINE_STEPS, first=None, path=None):
    """Draws `steps` steps from `first` (default: the trace's first) into `path` (default:
    OUT/timeline_<run>.png)."""
    spans, labels = run["trace"]
    if not spans:
        print(f"plot_results.py: warning: no spans in trace of {run['name']}", file=sys.stderr)
        return
    if first is None:
        first = min(s[2] for s in spans if s[2] >= 0)
    spans = [s for s in spans if first <= s[2] < first + steps]
    if not spans:
        print(f"plot: warning: no spans of steps {first}..{first + steps - 1} in {run['name']}",
              file=sys.stderr)
        return
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
            # A thin edge keeps back-to-back spans (buckets) apart.
            ax.broken_barh(bars, (row - 0.4, 0.8), color=colors[name], edgecolor="white",
                           linewidth=0.6)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[n]) for n in names]
    ax.legend(handles, names, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_yticks(range(len(ranks)), [labels.get(r, f"rank {r}") for r in ranks])
    ax.invert_yaxis()
    ax.set(title=f"{run['name']}: steps {first}-{first + steps - 1}",
           xlabel="time since first span (ms)")
    ax.grid(axis="x", alpha=0.3)
    name = re.sub(r"[^A-Za-z0-9._-]", "_", run["name"])
    save(fig, path or os.path.join(out, f"timeline_{name}.png"))
