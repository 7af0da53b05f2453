#!/usr/bin/env python3
"""A few steps of one run's trace.json as a PNG, one row per track: each rank's compute and
communication (an all-reduce that overlaps backward sits beside it), each ps shard's receive,
apply and reply. The picture a README or a slide needs; Perfetto shows the same spans live.

Usage: plot_trace.py RUN_FOLDER|trace.json OUT.png [--steps N] [--first STEP]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results_reader import PlotError, load_trace  # noqa: E402
from timeline_plot import plot_timeline  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="a run folder (holding trace.json) or a trace.json")
    parser.add_argument("out", help="the PNG to write")
    parser.add_argument("--steps", type=int, default=3, help="how many steps (default 3)")
    parser.add_argument("--first", type=int, default=None, help="the first step (default: the "
                        "trace's second, past start-up)")
    args = parser.parse_args()
    path = os.path.join(args.trace, "trace.json") if os.path.isdir(args.trace) else args.trace
    try:
        spans, labels = load_trace(path)
    except (OSError, PlotError) as e:
        sys.exit(f"plot_trace.py: {e}")
    if not spans:
        sys.exit(f"plot_trace.py: {path}: no spans")
    steps = sorted({s[2] for s in spans if s[2] >= 0})
    first = args.first if args.first is not None else steps[min(1, len(steps) - 1)]
    name = os.path.basename(os.path.dirname(os.path.abspath(path)))
    plot_timeline({"name": name, "trace": (spans, labels)}, os.path.dirname(args.out) or ".",
                  steps=args.steps, first=first, path=args.out)


if __name__ == "__main__":
    main()
