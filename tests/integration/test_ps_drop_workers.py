"""`gradsync run` with ps.continue_without_dead_workers (async): a worker killed with SIGKILL,
or stopped with SIGSTOP, mid-run is dropped and the run finishes with the others (exit 0,
summary.json naming the dropped worker, nothing left running), and --max-restarts is declined
for such a run; without the option, a stopped worker ends the run within its timeout, the last
line naming it.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from checks import Checks, children_of, process_name, still_alive

gradsync, preset = sys.argv[1], sys.argv[2]
check = Checks()


def run_and_hit(out, victim_rank, sig, extra=()):
    """Starts the preset, sends `sig` to rank `victim_rank` once it trained 20 steps; returns
    (exit code, stderr, seconds from the signal to the end, the victim's pid, every child's
    pid)."""
    launcher = subprocess.Popen([gradsync, "run", preset, "--output", out, *extra],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs, deadline = [], time.time() + 30
    while len(procs) < 4 and time.time() < deadline:
        time.sleep(0.2)
        procs = children_of(launcher.pid)
    check(len(procs) == 4, f"a shard and 3 workers started: {procs}")
    # Mid-run: once the victim has trained (its rows in metrics.csv), not while it starts.
    metrics = os.path.join(out, "latest", "drop", "metrics.csv")
    while time.time() < deadline + 30 and launcher.poll() is None:
        rows = open(metrics).read().splitlines()[1:] if os.path.exists(metrics) else []
        if sum(1 for r in rows if r.split(",")[1:2] == [str(victim_rank)]) >= 20:
            break
        time.sleep(0.1)
    victims = [p for p, args in procs if process_name(p, args) == f"rank {victim_rank}"]
    check(len(victims) == 1, f"rank {victim_rank} found among {procs}")
    hit = time.time()
    if victims:
        os.kill(victims[0], sig)
    try:
        _, err = launcher.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        launcher.kill()
        _, err = launcher.communicate()
        check(False, "the run ended within 90 s of the signal")
    return (launcher.returncode, err, time.time() - hit, victims[0] if victims else -1,
            [p for p, _ in procs])


def summary_of(out):
    path = os.path.join(os.path.realpath(os.path.join(out, "latest")), "drop", "summary.json")
    return json.load(open(path)) if os.path.exists(path) else {}


with tempfile.TemporaryDirectory() as out:
    # SIGKILL: the launcher says so and goes on; the shard drops it after its silence. Restarts
    # are for runs without the option: asked for, they are declined up front.
    code, err, took, victim, pids = run_and_hit(out, 2, signal.SIGKILL, ["--max-restarts", "2"])
    check(code == 0, f"killed worker: the run finished (exit {code}): {err[-2000:]}")
    said = f"rank 2 (pid {victim}) was killed by signal 9 (Killed); the run goes on without it"
    check(said in err, f"the launcher says {said!r}")
    check("worker 2 (last seen" in err and "dropped, the run goes on without it" in err,
          "the shard says it dropped worker 2")
    check(summary_of(out).get("dropped_workers") == [2], f"summary: {summary_of(out)}")
    check("--max-restarts does not apply: ps.continue_without_dead_workers drops" in err and
          "restart 1 of" not in err, "the run dropped the worker instead of restarting")
    time.sleep(0.5)
    check(still_alive(pids) == [], f"nothing left running: {still_alive(pids)}")

with tempfile.TemporaryDirectory() as out:
    # SIGSTOP: the shard drops the silent worker; the launcher kills it once the others are
    # done, after its 3 s grace, rather than wait for it for ever.
    code, err, took, victim, pids = run_and_hit(out, 1, signal.SIGSTOP)
    check(code == 0, f"stopped worker: the run finished (exit {code}): {err[-2000:]}")
    said = f"rank 1 (pid {victim}) still running 3 s after every other process finished"
    check(said in err, f"the launcher says {said!r}")
    check(summary_of(out).get("dropped_workers") == [1], f"summary: {summary_of(out)}")
    check(took < 40, f"the run ended {took:.1f} s after the stop")
    time.sleep(0.5)
    check(still_alive(pids) == [], f"nothing left running: {still_alive(pids)}")

with tempfile.TemporaryDirectory() as out:
    # Without the option a stopped worker ends the run within its 3 s timeout (the teardown's
    # SIGTERM comes with a SIGCONT).
    code, err, took, victim, pids = run_and_hit(
        out, 1, signal.SIGSTOP, ["--set", "ps.continue_without_dead_workers=false"])
    last = err.strip().splitlines()[-1] if err.strip() else ""
    check(code not in (0, None), f"without the option the run failed (exit {code})")
    check("worker 1 (last seen" in last and "stopped sending" in last,
          f"the last line names the stopped worker: {last!r}")
    check(took < 3 * 3, f"the run ended {took:.1f} s after the stop")
    time.sleep(0.5)
    check(still_alive(pids) == [], f"nothing left running: {still_alive(pids)}")

check.finish()
