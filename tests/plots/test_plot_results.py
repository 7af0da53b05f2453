#!/usr/bin/python3
"""Checks plots/plot_results.py on fabricated results folders. Plain script, no pytest.

Usage: /usr/bin/python3 tests/plots/test_plot_results.py [--keep]
(--keep leaves the temp folder in place and prints where it is.)
"""
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "plots", "plot_results.py")
PYTHON = "/usr/bin/python3"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# metrics.csv exactly as gradsync writes it (worker/metrics_writer.h).
HEADER = ("step,rank,epoch,time_s,loss,compute_s,communicate_s,wait_s,"
          "bytes_sent,bytes_received,staleness")


EVAL_EVERY = 100


def eval_steps(steps):
    """Steps completed at each evaluation: every EVAL_EVERY steps and after the last one."""
    return sorted(set(range(EVAL_EVERY, steps + 1, EVAL_EVERY)) | {steps})


def write_metrics(folder, workers, steps, step_s, startup_s, eval_s):
    """time_s is wall time since the launcher started, as in a real run: start-up (processes,
    data loading) before the first step and every evaluation so far lie in it, unlike in the
    step time (compute_s + communicate_s + wait_s)."""
    rng = random.Random(workers)
    lines = [HEADER]
    for step in range(steps):
        loss = 2.3 * math.exp(-step / 150) + 0.3 + rng.uniform(-0.1, 0.1)
        wall = startup_s + (step + 1) * step_s + (step // EVAL_EVERY) * eval_s
        for rank in range(workers):
            lines.append(f"{step},{rank},{step // 100},{wall:.9g},{loss:.6g},"
                         f"{step_s * 0.6:.9g},{step_s * 0.3:.9g},{step_s * 0.1:.9g},1000,1000,0")
    with open(os.path.join(folder, "metrics.csv"), "w") as f:
        f.write("\n".join(lines) + "\n")


def write_trace(folder, workers, steps, step_s):
    events = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": r,
               "args": {"name": f"rank {r}"}} for r in range(workers)]
    us = step_s * 1e6
    for step in range(steps):
        for rank in range(workers):
            t = step * us
            for name, frac, start in (("compute", 0.6, 0), ("communicate", 0.3, 0.6),
                                      ("wait", 0.1, 0.9)):
                events.append({"name": name, "ph": "X", "ts": t + start * us,
                               "dur": frac * us, "pid": 0, "tid": rank, "args": {"step": step}})
    with open(os.path.join(folder, "trace.json"), "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)


def write_summary(folder, name, strategy, workers, steps, step_s):
    # step: steps completed; time_s: training time then (step time summed, evaluation excluded)
    evals = [{"step": s, "time_s": s * step_s, "test_loss": 1.0 / (1 + s / 100),
              "test_accuracy": min(0.95, 0.5 + s / 1000)} for s in eval_steps(steps)]
    summary = {"run": name, "strategy": strategy, "workers": workers, "global_batch": 256,
               "steps": steps, "train_seconds": steps * step_s,
               "samples_per_s": 256 / step_s, "final_test_accuracy": evals[-1]["test_accuracy"],
               "final_test_loss": evals[-1]["test_loss"], "target_accuracy": 0.85,
               "time_to_accuracy_s": None, "busiest_node": {"name": "rank 0", "bytes": 123456},
               "mean_step_s": {"compute": step_s * 0.6, "communicate": step_s * 0.3,
                               "wait": step_s * 0.1}, "evals": evals}
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump(summary, f)


def make_run(parent, name, strategy, workers, steps=500, step_s=0.005, startup_s=1.0,
             eval_s=0.05):
    folder = os.path.join(parent, name)
    os.makedirs(folder)
    write_metrics(folder, workers, steps, step_s, startup_s, eval_s)
    write_trace(folder, workers, steps, step_s)
    write_summary(folder, name, strategy, workers, steps, step_s)
    return folder


# sweep.csv exactly as `gradsync sweep` writes it.
SWEEP_HEADER = ("run,strategy,workers,servers,mode,link_gbps,parameters,global_batch,steps,"
                "samples_per_s,scaling_efficiency,step_s,compute_s,communicate_s,wait_s,"
                "comm_share,busiest_node,busiest_bytes_per_step,series")
SWEEP_NS = [1, 2, 4, 8]
SWEEP_PARAMS = 1_200_000


def sweep_rows():
    """3 series x N in SWEEP_NS, shaped like the cost model: dp's replica 0 and a lone ps shard
    carry ~N model copies a step, the ring's ranks ~2 (sent + received each)."""
    model = SWEEP_PARAMS * 4
    rows = []
    for strategy, servers, mode in (("dp", 0, ""), ("ps", 1, "sync"), ("allreduce", 0, "")):
        for n in SWEEP_NS:
            if strategy == "dp":
                name, node, moved, slow = f"dp-n{n}", "replica 0", 2 * (n - 1) * model, 0.35
            elif strategy == "ps":
                name, node, moved, slow = (f"ps-k1-sync-n{n}", "server 0",
                                           max(2 * n * model / servers, 2 * model), 0.3)
            else:
                name, node, moved, slow = f"allreduce-n{n}", "rank 0", 4 * (n - 1) / n * model, 0.05
            step_s = 0.01 * (1 + slow * (n - 1))
            comm = step_s - 0.01
            rate = 256 * n / step_s
            eff = "" if n == 1 else f"{rate / (256 / 0.01) / n:.4f}"
            rows.append(f"{name},{strategy},{n},{servers},{mode},10,{SWEEP_PARAMS},{256 * n},200,"
                        f"{rate:.1f},{eff},{step_s:.6f},0.01,{comm * 0.7:.6f},{comm * 0.3:.6f},"
                        f"{comm / step_s:.4f},{node},{moved:.0f},{name.rsplit('-n', 1)[0]}")
    return rows


def make_sweep(root, rows=None, header=SWEEP_HEADER, run_folders=()):
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "sweep.csv"), "w") as f:
        f.write("\n".join([header] + (rows if rows is not None else sweep_rows())) + "\n")
    with open(os.path.join(root, "sweep.md"), "w") as f:
        f.write("# sweep\n")
    for name in run_folders:
        strategy, n = name.split("-")[0], int(name.rsplit("-n", 1)[1])
        make_run(root, name, strategy, n, steps=200, step_s=0.01 * (1 + 0.1 * (n - 1)))
    return root


def run_plot(*args):
    return subprocess.run([PYTHON, SCRIPT, *args], capture_output=True, text=True, timeout=120)


def check_png(path):
    assert os.path.isfile(path), f"missing {path}"
    with open(path, "rb") as f:
        assert f.read(8) == PNG_MAGIC, f"{path}: not a PNG"
    assert os.path.getsize(path) > 5000, f"{path}: only {os.path.getsize(path)} bytes"


def test_comparison_folder(tmp):
    cmp_dir = os.path.join(tmp, "cmp")
    make_run(cmp_dir, "dp-4", "dp", 4)
    make_run(cmp_dir, "ps-2", "ps", 2, step_s=0.008)
    out = os.path.join(tmp, "out")
    r = run_plot(cmp_dir, "--out", out)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
    expected = ["loss_vs_time.png", "throughput.png", "step_breakdown.png", "step_times.png",
                "timeline_dp-4.png", "timeline_ps-2.png"]
    for name in expected:
        check_png(os.path.join(out, name))
    printed = set(r.stdout.split())
    assert printed == {os.path.join(out, n) for n in expected}, f"printed {r.stdout!r}"


def test_single_run_default_out(tmp):
    run = make_run(tmp, "single-1", "single", 1)
    r = run_plot(run)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
    for name in ["loss_vs_time.png", "throughput.png", "step_breakdown.png", "step_times.png",
                 "timeline_single-1.png"]:
        check_png(os.path.join(run, "plots", name))


def test_no_summary_fails(tmp):
    empty = os.path.join(tmp, "empty")
    os.makedirs(os.path.join(empty, "sub"))
    r = run_plot(empty)
    assert r.returncode != 0, "expected a non-zero exit"
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "summary.json" in lines[0], f"stderr {r.stderr!r}"


def test_malformed_file_named(tmp):
    run = make_run(tmp, "bad-1", "single", 1, steps=200)
    with open(os.path.join(run, "summary.json"), "w") as f:
        f.write("{not json")
    r = run_plot(run)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1, f"exit {r.returncode}, {r.stderr!r}"
    assert os.path.join(run, "summary.json") in lines[0], f"stderr {r.stderr!r}"


def test_bad_csv_row_named(tmp):
    run = make_run(tmp, "badcsv-1", "single", 1, steps=200)
    with open(os.path.join(run, "metrics.csv"), "a") as f:
        f.write("7,0,0,oops,1.0,0,0,0,0,0\n")
    r = run_plot(run)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1, f"exit {r.returncode}, {r.stderr!r}"
    assert "metrics.csv" in lines[0], f"stderr {r.stderr!r}"


SWEEP_PLOTS = ["scaling_throughput.png", "busiest_node_bytes.png", "comm_share.png"]


def test_sweep_folder(tmp):
    names = [row.split(",")[0] for row in sweep_rows()]
    present = [n for n in names if n != "allreduce-n8"]  # a failed grid point: no folder
    root = make_sweep(os.path.join(tmp, "sweep"), run_folders=present)
    r = run_plot(root)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
    out = os.path.join(root, "plots")
    # One timeline per series, its largest N with a run folder (allreduce-n8 has none).
    expected = (SWEEP_PLOTS + ["loss_vs_time.png", "throughput.png", "step_breakdown.png",
                               "step_times.png"] +
                ["timeline_dp-n8.png", "timeline_ps-k1-sync-n8.png", "timeline_allreduce-n4.png"])
    for name in expected:
        check_png(os.path.join(out, name))
    for name in SWEEP_PLOTS:  # lines, labels, legend: well past a blank canvas
        size = os.path.getsize(os.path.join(out, name))
        assert size > 30000, f"{name}: only {size} bytes"
    printed = set(r.stdout.split())
    assert printed == {os.path.join(out, n) for n in expected}, f"printed {r.stdout!r}"


def test_sweep_without_run_folders(tmp):
    root = make_sweep(os.path.join(tmp, "sweep"))
    out = os.path.join(tmp, "out")
    r = run_plot(root, "--out", out)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
    for name in SWEEP_PLOTS:
        check_png(os.path.join(out, name))
    assert set(os.listdir(out)) == set(SWEEP_PLOTS), f"wrote {sorted(os.listdir(out))}"


def expect_sweep_error(root, *fragments):
    r = run_plot(root)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1, f"exit {r.returncode}, {r.stderr!r}"
    for fragment in (os.path.join(root, "sweep.csv"),) + fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert not os.path.exists(os.path.join(root, "plots", "scaling_throughput.png"))


def test_sweep_missing_column_named(tmp):
    columns = SWEEP_HEADER.split(",")
    drop = columns.index("comm_share")
    rows = [",".join(f for i, f in enumerate(row.split(",")) if i != drop) for row in sweep_rows()]
    header = ",".join(c for c in columns if c != "comm_share")
    root = make_sweep(os.path.join(tmp, "sweep"), rows, header, run_folders=["dp-n2"])
    expect_sweep_error(root, "comm_share")


def test_sweep_bad_number_named(tmp):
    rows = sweep_rows()
    fields = rows[2].split(",")
    fields[SWEEP_HEADER.split(",").index("samples_per_s")] = "fast"
    rows[2] = ",".join(fields)
    root = make_sweep(os.path.join(tmp, "sweep"), rows, run_folders=["dp-n2"])
    expect_sweep_error(root, "sweep.csv:4", "samples_per_s", "'fast'")


def test_sweep_series_are_runs(tmp):
    """Two runs of one strategy (overlap on and off) are two series with their own labels; a
    sweep.csv without the series column (an older gradsync) still groups by strategy."""
    sys.path.insert(0, os.path.join(ROOT, "plots"))
    from sweep_grouping import sweep_series
    rows = [{"run": f"{name}-n{n}", "strategy": "allreduce", "workers": n, "servers": 0,
             "mode": "", "link_gbps": 0.0, "parameters": 1000, "series": name}
            for name in ("overlap", "no-overlap") for n in (1, 2)]
    series = sweep_series(rows)
    assert [label for label, _ in series] == ["allreduce (overlap)", "allreduce (no-overlap)"], \
        series
    assert [[r["run"] for r in members] for _, members in series] == [
        ["overlap-n1", "overlap-n2"], ["no-overlap-n1", "no-overlap-n2"]]
    for row in rows:
        row["series"] = None
    assert [label for label, _ in sweep_series(rows)] == ["allreduce"]


def test_loss_and_accuracy_share_clock(tmp):
    """loss_vs_time.png puts the loss curve and the accuracy points on one clock, training time
    (summary.json's evals[].time_s and time_to_accuracy_s), not metrics.csv's wall time_s: a
    run with 3.1 s of start-up and 50 ms evaluations but 10 us steps (as in a real small run)
    still has each accuracy point on its step of the loss curve."""
    sys.path.insert(0, os.path.join(ROOT, "plots"))
    import matplotlib
    matplotlib.use("Agg")
    from results_reader import load_run
    from run_plots import loss_and_accuracy
    steps, step_s = 700, 1e-5
    folder = make_run(tmp, "offset-2", "allreduce", 2, steps=steps, step_s=step_s,
                      startup_s=3.1, eval_s=0.05)
    with open(os.path.join(folder, "summary.json")) as f:
        evals = json.load(f)["evals"]
    run = load_run(folder)
    (x, _), (t, acc) = loss_and_accuracy(run, window=1)
    assert len(x) == steps, f"{len(x)} loss points for {steps} steps"
    assert list(t) == [e["time_s"] for e in evals], f"eval times {list(t)}"
    for e in evals:  # x[i]: training time at the end of step i (step i + 1 completed)
        assert math.isclose(x[e["step"] - 1], e["time_s"], rel_tol=1e-6), \
            f"step {e['step']}: loss curve at {x[e['step'] - 1]} s, accuracy at {e['time_s']} s"
    # the ranges: curve from the first step's end to the last eval, smoothed or not
    for window in (1, 14):
        (x, _), _ = loss_and_accuracy(run, window)
        assert math.isclose(x[-1], t[-1], rel_tol=1e-6), f"window {window}: ends {x[-1]}, {t[-1]}"
        assert 0 < x[0] <= t[0], f"window {window}: starts at {x[0]} s, first eval {t[0]} s"


def test_step_times(tmp):
    """step_times.png: every rank's steps of each run, percentiles by the nearest-rank rule as
    summary.json's, and the slowest rank as summary.json names it (or, from an older gradsync
    without slowest_rank, the rank of the highest p99 in metrics.csv)."""
    sys.path.insert(0, os.path.join(ROOT, "plots"))
    import matplotlib
    matplotlib.use("Agg")
    from results_reader import load_run
    from step_time_plot import box_stats, slowest_rank
    cmp_dir = os.path.join(tmp, "cmp")
    fast = make_run(cmp_dir, "ring-2", "allreduce", 2, steps=100)
    # ps-3: ranks 0 and 2 take 1..100 ms, rank 1 (the straggler) 101..200 ms a step.
    slow = make_run(cmp_dir, "ps-3", "ps", 3, steps=100)
    lines = [HEADER]
    for step in range(100):
        for rank in range(3):
            step_s = (step + 1 + (100 if rank == 1 else 0)) * 1e-3
            lines.append(f"{step},{rank},0,{step * 0.3:.9g},1.0,{step_s:.9g},0,0,1000,1000,0")
    with open(os.path.join(slow, "metrics.csv"), "w") as f:
        f.write("\n".join(lines) + "\n")
    run = load_run(slow)
    assert sorted(run["step_s"]) == [0, 1, 2], f"ranks {sorted(run['step_s'])}"
    assert all(len(v) == 100 for v in run["step_s"].values())
    stats = box_stats(run["step_s"], "ps-3")
    # 300 steps: p50 is the 150th (75 ms of ranks 0 and 2, 150 values up to it), p99 the 297th.
    assert math.isclose(stats["med"], 75, rel_tol=1e-6), f"p50 {stats['med']}"
    assert math.isclose(stats["p99"], 197, rel_tol=1e-6), f"p99 {stats['p99']}"
    assert len(stats["fliers"]) == 3 + 2, f"fliers {stats['fliers']}"  # 198-200; 1 ms twice
    # Without slowest_rank in summary.json: the highest p99 of metrics.csv, rank 1's 199 ms.
    assert slowest_rank(run) == (1, 199.0), f"slowest {slowest_rank(run)}"
    # With it: the rank summary.json names (its own percentiles may differ a little).
    run["summary"]["slowest_rank"] = {"rank": 2, "p99_s": 0.1, "others_median_p99_s": 0.05}
    assert slowest_rank(run) == (2, 99.0), f"named {slowest_rank(run)}"
    assert slowest_rank(load_run(fast)) is not None
    one = load_run(make_run(tmp, "single-1", "single", 1, steps=50))
    assert slowest_rank(one) is None, "a run of one rank has no straggler"
    out = os.path.join(tmp, "out")
    r = run_plot(cmp_dir, "--out", out)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
    check_png(os.path.join(out, "step_times.png"))


def main():
    keep = "--keep" in sys.argv
    tmp = tempfile.mkdtemp(prefix="plot_results_test_")
    tests = [test_comparison_folder, test_single_run_default_out, test_no_summary_fails,
             test_malformed_file_named, test_bad_csv_row_named, test_sweep_folder,
             test_sweep_without_run_folders, test_sweep_missing_column_named,
             test_sweep_bad_number_named, test_sweep_series_are_runs,
             test_loss_and_accuracy_share_clock, test_step_times]
    passed = failed = 0
    try:
        for test in tests:
            sub = os.path.join(tmp, test.__name__)
            os.makedirs(sub)
            try:
                test(sub)
                passed += 1
                print(f"ok   {test.__name__}")
            except AssertionError as e:
                failed += 1
                print(f"FAIL {test.__name__}: {e}")
    finally:
        if keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
