"""`gradsync run` with the parameter server: K shard processes and N workers.

1. sync with 2 shards follows single on the same global batch (same accuracy within 1%);
   async and ssp learn Fashion-MNIST to >= 85%; ssp's recorded staleness never exceeds 2;
   the busiest node of a one-shard run is the shard.
2. A worker killed with SIGKILL in sync mode ends the whole run within the timeout, with a
   message naming it, and leaves no process behind.
(Handshake refusals, garbage frames and CURVE are unit-tested in tests/unit/test_ps_*.cpp.)
"""
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from checks import Checks

gradsync, preset = sys.argv[1], sys.argv[2]
check = Checks()


def children_of(pid):
    out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(pid)], capture_output=True,
                         text=True)
    return [(int(line.split()[0]), line) for line in out.stdout.strip().splitlines()]


with tempfile.TemporaryDirectory() as out:
    proc = subprocess.run([gradsync, "run", preset, "--output", out], capture_output=True,
                          text=True, timeout=400)
    check(proc.returncode == 0, f"gradsync run exited {proc.returncode}: {proc.stderr[-3000:]}")
    top = os.path.realpath(os.path.join(out, "latest"))
    summaries = {}
    for run in ["single", "ps-sync-k2", "ps-async", "ps-ssp-2"]:
        path = os.path.join(top, run, "summary.json")
        if os.path.exists(path):
            summaries[run] = json.load(open(path))
    check(len(summaries) == 4, f"every run wrote a summary: {sorted(summaries)}")
    if len(summaries) == 4:
        acc = {run: s["final_test_accuracy"] for run, s in summaries.items()}
        check(abs(acc["ps-sync-k2"] - acc["single"]) <= 0.01,
              f"ps sync accuracy {acc['ps-sync-k2']:.4f} vs single {acc['single']:.4f}")
        check(acc["ps-async"] >= 0.85, f"ps async reaches 85%: {acc['ps-async']:.4f}")
        check(acc["ps-ssp-2"] >= 0.85, f"ps ssp reaches 85%: {acc['ps-ssp-2']:.4f}")
        check(summaries["ps-async"]["busiest_node"]["name"] == "server 0",
              f"one shard is the busiest node: {summaries['ps-async']['busiest_node']}")
        rows = list(csv.DictReader(open(os.path.join(top, "ps-ssp-2", "metrics.csv"))))
        worst = max(int(r["staleness"]) for r in rows)
        check(worst <= 2, f"ssp staleness never exceeds 2 (max {worst})")
        rows = list(csv.DictReader(open(os.path.join(top, "ps-sync-k2", "metrics.csv"))))
        check(all(r["staleness"] == "0" for r in rows), "sync mode is never stale")

    # A worker killed mid-run in sync mode.
    launcher = subprocess.Popen([gradsync, "run", preset, "--output", out, "--only", "ps-sync-k2",
                                 "--set", "train.epochs=50", "--set", "comm.timeout_s=5"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs = []
    deadline = time.time() + 30
    while len(procs) < 4 and time.time() < deadline:
        time.sleep(0.2)
        procs = children_of(launcher.pid)
    check(len(procs) == 4, f"two shards and two workers started ({len(procs)})")
    time.sleep(3)
    workers = [pid for pid, args in procs if " worker " in args]
    victim = workers[-1] if workers else -1
    try:
        os.kill(victim, signal.SIGKILL)
    except (ProcessLookupError, OverflowError):
        check(False, f"a worker was running to be killed ({procs})")
    started = time.time()
    try:
        _, err = launcher.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        launcher.kill()
        _, err = launcher.communicate()
    elapsed = time.time() - started
    last = err.strip().splitlines()[-1] if err.strip() else ""
    check(launcher.returncode not in (0, None), f"the run failed (exit {launcher.returncode})")
    check(elapsed < 15, f"the run ended {elapsed:.1f} s after the kill (timeout 5 s)")
    check(f"pid {victim}" in last and "signal 9" in last,
          f"the error names the killed worker and its signal: {last!r}")
    time.sleep(0.5)
    alive = [p for p, _ in procs if os.path.exists(f"/proc/{p}") and
             open(f"/proc/{p}/stat").read().split()[2] != "Z"]
    check(alive == [], f"no process left behind: {alive}")

check.finish()
