#!/usr/bin/env python3
"""Compares the runs of one `gradsync run gpu-check` results folder with its reference run.

    scripts/gpu_check_compare.py RESULTS_FOLDER --reference single --widths 784,256,256,10 \
        --steps 78,234 --limit 1e-4 [--runs dp-1,nccl-1]

Prints one row per run (samples/s, test accuracy, the parameter difference at each step) and
exits non-zero when a run is missing a checkpoint or differs from the reference by more than
--limit at the first step; with --runs only those runs (and the reference) are compared, the
others of the folder left out. The difference is tests/support/compare.h's: per weight matrix and
bias vector, max |a - b| / max |b|, the worst over the model; element-wise ratios would read one
float rounding of a weight near zero as a large error.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))
from checks import load_checkpoint  # noqa: E402  (the checkpoint reader the tests use)


def tensors(widths):
    """(begin, end) of each weight matrix and bias vector in the flat parameter layout
    (model/mlp.h: W_l out x in, then b_l, layer by layer)."""
    out, offset = [], 0
    for fan_in, fan_out in zip(widths, widths[1:]):
        out.append((offset, offset + fan_in * fan_out))
        offset += fan_in * fan_out
        out.append((offset, offset + fan_out))
        offset += fan_out
    return out, offset


def difference(a, b, ranges):
    worst = 0.0
    for begin, end in ranges:
        diff = max(abs(x - y) for x, y in zip(a[begin:end], b[begin:end]))
        scale = max(abs(y) for y in b[begin:end])
        worst = max(worst, diff / scale if scale > 0 else diff)
    return worst


def params_at(run_dir, step):
    folder = os.path.join(run_dir, "checkpoints", f"step-{step:08d}")
    if not os.path.isdir(folder):
        return None
    found, params = load_checkpoint(folder)
    return params if found == step else None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("results")
    parser.add_argument("--reference", default="single")
    parser.add_argument("--widths", required=True)
    parser.add_argument("--steps", required=True)
    parser.add_argument("--limit", type=float, default=1e-4)
    parser.add_argument("--runs", help="only these runs, comma-separated (default: every run)")
    args = parser.parse_args()
    widths = [int(w) for w in args.widths.split(",")]
    steps = [int(s) for s in args.steps.split(",")]
    ranges, count = tensors(widths)

    runs = sorted(d for d in os.listdir(args.results)
                  if os.path.isfile(os.path.join(args.results, d, "summary.json")))
    if args.reference not in runs:
        print(f"gpu-check: no reference run '{args.reference}' in {args.results}")
        return 1
    if args.runs:
        chosen = args.runs.split(",")
        absent = [run for run in chosen if run not in runs]
        if absent:
            print(f"gpu-check: --runs names runs that are not in {args.results}: "
                  f"{', '.join(absent)} (runs: {', '.join(runs)})")
            return 1
        runs = [run for run in runs if run in chosen or run == args.reference]
    reference = {s: params_at(os.path.join(args.results, args.reference), s) for s in steps}
    header = "| run | samples/s | test acc | " + " | ".join(f"diff @{s}" for s in steps)
    print(header + " | follows " + args.reference + " |")
    print("|---|---:|---:|" + "---:|" * len(steps) + "---|")
    failed = False
    for run in runs:
        summary = json.load(open(os.path.join(args.results, run, "summary.json")))
        cells = []
        verdict = "reference" if run == args.reference else "yes"
        for i, step in enumerate(steps):
            params = params_at(os.path.join(args.results, run), step)
            if params is None or reference[step] is None or len(params) != count:
                cells.append("missing")
                verdict = "NO (checkpoint missing)"
                continue
            d = difference(params, reference[step], ranges)
            cells.append(f"{d:.1e}")
            if i == 0 and d > args.limit and run != args.reference:
                verdict = f"NO (> {args.limit:g})"
        failed |= verdict.startswith("NO")
        print(f"| {run} | {summary['samples_per_s']:.0f} | "
              f"{100 * summary['final_test_accuracy']:.2f}% | " + " | ".join(cells) +
              f" | {verdict} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
