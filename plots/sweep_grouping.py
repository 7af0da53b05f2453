"""A sweep's rows grouped into series (strategy, ps shards, ps mode), their labels and titles,
and the sweep's run folders ordered, coloured and thinned to one timeline per series."""
import matplotlib.colors as mcolors

from plot_style import series_colors


def human_count(n):
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:g}"


def sweep_series(rows):
    """Groups the rows into series: [(label, rows by increasing N)], in order of first
    appearance. A series is one run of the preset at every N (sweep.csv's series column; a
    sweep.csv without it groups by strategy, ps shards and ps mode). The label says strategy,
    ps shards and mode, with link cap and model size when the sweep varies them, and the run's
    name when two series would otherwise read the same."""
    varies = {c: len({r[c] for r in rows}) > 1 for c in ("link_gbps", "parameters")}
    series = {}
    for row in rows:
        key = (row["strategy"], row["servers"], row["mode"],
               row["link_gbps"] if varies["link_gbps"] else None,
               row["parameters"] if varies["parameters"] else None)
        series.setdefault((row.get("series"), key), []).append(row)
    labels = []
    for (_, (strategy, servers, mode, link, params)), members in series.items():
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
        labels.append(", ".join([" ".join(parts)] + extras))
    out = []
    for label, ((name, _), members) in zip(labels, series.items()):
        if name is not None and labels.count(label) > 1:
            label += f" ({name})"
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
