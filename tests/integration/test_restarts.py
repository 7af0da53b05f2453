"""Elastic restarts: a worker killed mid-run is started again with the others, and the run goes
on from its newest checkpoint to the same end as a run never interrupted.

1. `gradsync run --max-restarts 1`: the local launcher restarts the group, saying why.
2. Debian's torchrun `--max_restarts 1`: its agent restarts the group with
   TORCHELASTIC_RESTART_COUNT=1; rank 0 finds the first attempt's run folder and checkpoint.

Each ends with the final parameters of an uninterrupted `gradsync run` (within 1e-6) and one
metrics row per rank per step: the rows the failed attempt wrote past its checkpoint are gone.
"""
import collections
import csv
import os
import signal
import subprocess
import sys
import tempfile
import time

from checks import Checks, last_step_params, children_of, max_rel_diff, free_port

gradsync, preset = sys.argv[1], sys.argv[2]
DEBIAN_PYTHON = "/usr/bin/python3"
STEPS, WORKERS, KILL_AFTER = 100, 2, 30  # as the preset says; kill once step 30 is logged
check = Checks()



def rank_pids(ancestor, rank):
    """The gradsync worker processes of rank `rank` (RANK in their environment) among the
    descendants of `ancestor`: other tests run their own ranks beside this one."""
    found, exe, todo = [], os.path.realpath(gradsync), [ancestor]
    while todo:
        for pid, _ in children_of(todo.pop()):
            todo.append(pid)
            try:
                running = os.readlink(f"/proc/{pid}/exe")
                environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            except OSError:
                continue
            if running == exe and f"RANK={rank}".encode() in environ:
                found.append(pid)
    return found


def kill_rank_1_mid_run(out, proc):
    """Waits until step KILL_AFTER is in metrics.csv, then SIGKILLs rank 1."""
    metrics = os.path.join(out, "latest", "ring", "metrics.csv")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            steps = [int(line.split(",")[0]) for line in open(metrics).read().splitlines()[1:]
                     if line]
        except (OSError, ValueError):
            steps = []
        if steps and max(steps) >= KILL_AFTER:
            victims = rank_pids(proc.pid, 1)
            for pid in victims:
                os.kill(pid, signal.SIGKILL)
            return max(steps), victims
        time.sleep(0.02)
    return None, []


def check_restarted(label, proc, out, reference, killed_at, victims, said):
    stdout, stderr = proc.communicate(timeout=180)
    check(killed_at is not None and victims, f"{label}: rank 1 killed mid-run (after step "
                                             f"{killed_at}, pids {victims})")
    check(proc.returncode == 0, f"{label}: the restarted run succeeds, exit {proc.returncode}: "
                                f"{(stdout + stderr)[-2000:]}")
    check(said in stdout + stderr, f"{label}: says it restarted ({said!r})")
    run_dir = os.path.realpath(os.path.join(out, "latest", "ring"))
    rows = list(csv.DictReader(open(os.path.join(run_dir, "metrics.csv"))))
    counts = collections.Counter((int(r["step"]), int(r["rank"])) for r in rows)
    want = {(s, r) for s in range(STEPS) for r in range(WORKERS)}
    check(set(counts) == want and set(counts.values()) == {1},
          f"{label}: one metrics row per rank per step ({len(rows)} rows, "
          f"{sum(c > 1 for c in counts.values())} repeated, {len(want - set(counts))} missing)")
    diff = max_rel_diff(last_step_params(check, run_dir, STEPS), reference)
    check(diff <= 1e-6, f"{label}: final parameters as without the failure (max rel diff {diff:g})")


with tempfile.TemporaryDirectory() as top:
    ref = os.path.join(top, "ref")
    done = subprocess.run([gradsync, "run", preset, "--output", ref], capture_output=True,
                          text=True, timeout=180)
    check(done.returncode == 0, f"uninterrupted run: exit {done.returncode}: {done.stderr[-2000:]}")
    reference = last_step_params(
        check, os.path.join(os.path.realpath(os.path.join(ref, "latest")), "ring"), STEPS)

    out = os.path.join(top, "run")
    proc = subprocess.Popen([gradsync, "run", preset, "--output", out, "--max-restarts", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed_at, victims = kill_rank_1_mid_run(out, proc)
    check_restarted("gradsync run --max-restarts 1", proc, out, reference, killed_at, victims,
                    "restart 1 of 1, from ")

    out = os.path.join(top, "torchrun")
    # -r 1 -t 2: Debian's torch 1.13 under Python 3.11 crashes on its default redirects/tee.
    proc = subprocess.Popen(
        [DEBIAN_PYTHON, "-m", "torch.distributed.run", f"--nproc_per_node={WORKERS}",
         "--max_restarts", "1", "--monitor_interval", "0.5", "-r", "1", "-t", "2",
         "--log_dir", os.path.join(top, "torchrun-logs"), "--master_port", str(free_port()),
         "--no_python", gradsync, "worker", preset, "--set", f"output.dir={out}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed_at, victims = kill_rank_1_mid_run(out, proc)
    check_restarted("torchrun --max_restarts 1", proc, out, reference, killed_at, victims,
                    "restarts from ")

check.finish()
