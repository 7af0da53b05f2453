#!/usr/bin/python3
"""Turn a gradsync results folder (one run, or a comparison of runs) into PNGs.

Usage: plot_results.py RESULTS_DIR [--out DIR]

Every folder gets loss_vs_time.png, throughput.png, step_breakdown.png, step_times.png (each
run's step-time distribution: p50, p99, the slowest rank) and timeline_<run>.png.
A sweep folder (`gradsync sweep PRESET`: sweep.csv plus one run folder per grid point) also
gets, one line per series (strategy, ps shards K, ps mode) against the worker count N:
scaling_throughput.png (samples/s, with each series' ideal linear scaling from its smallest
N), busiest_node_bytes.png (MiB per step through the node that moves the most) and
comm_share.png (communicate + wait share of the step). In a sweep only the largest-N run of
each series gets a timeline.
"""
import argparse
import os
import sys

import matplotlib

matplotlib.use("Agg")
# The pieces lie beside this script; find them wherever it is run from (a symlink included).
sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from results_reader import PlotError, find_runs, load_run, load_sweep  # noqa: E402
from run_plots import plot_breakdown, plot_loss, plot_throughput  # noqa: E402
from step_time_plot import plot_step_times  # noqa: E402
from sweep_grouping import arrange_sweep_runs, sweep_series  # noqa: E402
from sweep_plots import (plot_sweep_busiest, plot_sweep_comm_share,  # noqa: E402
                         plot_sweep_throughput)
from timeline_plot import plot_timeline  # noqa: E402


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
            plot_step_times(runs, out)
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
