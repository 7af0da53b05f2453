"""The plots every results folder gets, one line or bar per run: loss_vs_time.png,
throughput.png and step_breakdown.png."""
import os

import matplotlib.pyplot as plt
import numpy as np

from plot_style import MANY_RUNS, PHASE_COLORS, save, series_colors
from results_reader import PHASES


def moving_average(x, y, window):
    if len(y) < window or window <= 1:
        return x, y
    kernel = np.ones(window) / window
    return x[window - 1:], np.convolve(y, kernel, mode="valid")


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


def loss_and_accuracy(run, window):
    """The two series of a run's loss_vs_time.png, both against training time (s): rank 0's
    loss averaged over `window` steps as (x, y), and the test accuracy points as (t, acc).
    Both clocks are rank 0's step time summed, evaluation excluded (results_reader.load_metrics;
    summary.json's evals[].time_s), so curve and points line up, and runs of different
    strategies compare without their start-up, evaluation and checkpoint times."""
    loss = moving_average(run["train_s"], run["loss"], window)
    evals = run["summary"]["evals"]
    accuracy = tuple(np.array(v) for v in zip(*evals)) if evals else (np.array([]), np.array([]))
    return loss, accuracy


def plot_loss(runs, out):
    fig, (ax_loss, ax_acc) = plt.subplots(2, 1, figsize=(9, 7), sharex=True,
                                          gridspec_kw={"height_ratios": [2, 1]})
    many = len(runs) > MANY_RUNS
    windows = [int(np.clip(len(run["loss"]) // 50, 1, 200)) for run in runs]
    same_window = len(set(windows)) == 1
    for run, color, window in zip(runs, run_colors(runs), windows):
        (x, y), (t, acc) = loss_and_accuracy(run, window)
        label = run["name"] if same_window else f"{run['name']} (avg of {window} steps)"
        ax_loss.plot(x, y, color=color, label=label)
        if len(t):
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
    ax_acc.set(xlabel="training time (s): rank 0's steps summed, evaluation excluded",
               ylabel="test accuracy")
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
