"""A scheduler's stop (Slurm: scancel, the time limit, preemption, `--signal=USR1@N`): SIGTERM
reaches the two ranks of a ring at different steps; they agree on one step, rank 0 checkpoints
it, and both exit 143 with one line naming that step and checkpoint. `--resume auto` then goes
on from it to the parameters of a run never stopped (within 1e-6), one metrics row per rank per
step. The ranks are started by hand with torchrun's variables, as any launcher would."""
import collections
import csv
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from checks import Checks, last_step_params, load_checkpoint, max_rel_diff, free_port

gradsync, preset = sys.argv[1], sys.argv[2]
STEPS, WORKERS, SIGNAL_AFTER = 100, 2, 30  # as the preset says
check = Checks()



def start_ranks(out, *extra):
    port = free_port()
    return [subprocess.Popen(
        [gradsync, "worker", preset, "--set", f"output.dir={out}", *extra],
        env=dict(os.environ, RANK=str(r), WORLD_SIZE=str(WORKERS), LOCAL_RANK=str(r),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(WORKERS)]


with tempfile.TemporaryDirectory() as top:
    done = subprocess.run([gradsync, "run", preset, "--output", os.path.join(top, "ref")],
                          capture_output=True, text=True, timeout=180)
    check(done.returncode == 0, f"uninterrupted run: exit {done.returncode}: {done.stderr[-2000:]}")
    reference = last_step_params(
        check, os.path.join(os.path.realpath(os.path.join(top, "ref", "latest")), "ring"), STEPS)

    out = os.path.join(top, "out")
    ranks = start_ranks(out)
    metrics = os.path.join(out, "latest", "ring", "metrics.csv")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and all(p.poll() is None for p in ranks):
        try:
            steps = [int(l.split(",")[0]) for l in open(metrics).read().splitlines()[1:] if l]
        except (OSError, ValueError):
            steps = []
        if steps and max(steps) >= SIGNAL_AFTER:
            break
        time.sleep(0.02)
    # Apart by a few steps' time, as a scheduler's signals arrive.
    ranks[0].send_signal(signal.SIGTERM)
    time.sleep(0.1)
    ranks[1].send_signal(signal.SIGTERM)
    stopped_at = set()
    for r, p in enumerate(ranks):
        _, err = p.communicate(timeout=60)
        last = err.strip().splitlines()[-1] if err.strip() else ""
        check(p.returncode == 128 + signal.SIGTERM, f"rank {r}: exit {p.returncode} (143 wanted): "
                                                    f"{err[-1500:]}")
        found = re.search(r"SIGTERM: stopped after step (\d+) of 100 with every rank; checkpoint "
                          r"(\S+)", last)
        check(found is not None, f"rank {r}: the last line names the step and checkpoint: {last!r}")
        if found:
            stopped_at.add((int(found.group(1)), found.group(2)))
    check(len(stopped_at) == 1, f"both ranks stopped after the same step: {stopped_at}")
    if len(stopped_at) == 1:
        step, folder = stopped_at.pop()
        check(SIGNAL_AFTER <= step < STEPS, f"stopped mid-run, after step {step}")
        check(load_checkpoint(folder)[0] == step, f"the checkpoint {folder} is of step {step}")

    ranks = start_ranks(out, "--resume", "auto")
    for r, p in enumerate(ranks):
        _, err = p.communicate(timeout=120)
        check(p.returncode == 0, f"resumed rank {r}: exit {p.returncode}: {err[-1500:]}")
    run_dir = os.path.realpath(os.path.join(out, "latest", "ring"))
    rows = list(csv.DictReader(open(os.path.join(run_dir, "metrics.csv"))))
    counts = collections.Counter((int(row["step"]), int(row["rank"])) for row in rows)
    want = {(s, r) for s in range(STEPS) for r in range(WORKERS)}
    check(set(counts) == want and set(counts.values()) == {1},
          f"one metrics row per rank per step ({len(rows)} rows)")
    diff = max_rel_diff(last_step_params(check, run_dir, STEPS), reference)
    check(diff <= 1e-6, f"resumed: final parameters as never stopped (max rel diff {diff:g})")

check.finish()
