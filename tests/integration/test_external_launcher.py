"""`gradsync worker` (and, for ps, `gradsync server`) under another launcher (torchrun's
variables, as mpirun or srun would give them): two workers started by hand from one config.yaml
train together, over the ring and over a parameter server; metrics.csv holds
one header and one row per rank per step, whichever rank writes first; and rank 0 leaves the
same summary.json and trace.json as `gradsync run` would; the ranks' clocks share time zero
(the end of the initial broadcast, or of the first exchange with the shards) though they
started apart. A GRADSYNC_STORE_FD or GRADSYNC_SHARD_FD that is not a listening socket is refused in
one line.
"""
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

from checks import Checks, free_port

gradsync = sys.argv[1]
check = Checks()
CONFIG = """strategy: allreduce
workers: 2
data: {kind: synthetic, train_samples: 2048, test_samples: 256}
model: {hidden: [32]}
train: {steps: 40, batch: 16}
comm: {timeout_s: 20}
output: {progress: off}
runs:
  - name: external-2
"""

STEPS, WORKERS = 40, 2  # as CONFIG says
PS_CONFIG = CONFIG.replace("strategy: allreduce", "strategy: ps\nps: {servers: 1, mode: sync}")



def run_by_hand(config_text, label, late):
    """Starts the run's processes as another launcher would, rank `late` 1.5 s after the other
    (rank 1 first must wait for rank 0, not fail), then checks what rank 0 leaves."""
    with tempfile.TemporaryDirectory() as run_dir:
        config = os.path.join(run_dir, "config.yaml")
        with open(config, "w") as f:
            f.write(config_text)
        port = free_port()  # rank 0's store (allreduce)
        procs, worker_args = [], []
        if "strategy: ps" in config_text:
            shard_port = free_port()
            procs.append(subprocess.Popen(
                [gradsync, "server", "--config", config, "--run-dir", run_dir, "--shard", "0",
                 "--port", str(shard_port)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            worker_args = ["--ps-endpoints", f"tcp://127.0.0.1:{shard_port}"]
        # The late rank starts 1.5 s after the other; the ranks' clocks must still agree.
        for rank in (1 - late, late):
            if rank == late:
                time.sleep(1.5)
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            procs.append(subprocess.Popen(
                [gradsync, "worker", "--config", config, "--run-dir", run_dir, *worker_args],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        for p in procs:
            out, _ = p.communicate(timeout=120)
            check(p.returncode == 0, f"{label}: process exited {p.returncode}: {out[-1000:]}")
        lines = open(os.path.join(run_dir, "metrics.csv")).read().splitlines()
        check(lines[0].startswith("step,rank,"), f"{label}: metrics.csv starts with its header")
        check(sum(line.startswith("step,") for line in lines) == 1, f"{label}: exactly one header")
        rows = list(csv.DictReader(lines))
        check(len(rows) == STEPS * WORKERS,
              f"{label}: one row per rank per step: {len(rows)} rows, expected {STEPS * WORKERS}")
        check({r["rank"] for r in rows} == {"0", "1"}, f"{label}: rows from both ranks")
        check(all(len(r) == len(rows[0]) and None not in r.values() for r in rows),
              f"{label}: no row torn by the other rank's writes")
        # One time axis although one rank started 1.5 s after the other: a synchronous step
        # ends at about the same moment on both ranks.
        ends = {}
        for r in rows:
            ends.setdefault(r["step"], {})[r["rank"]] = float(r["time_s"])
        skew = max((abs(t["0"] - t["1"]) for t in ends.values() if len(t) == 2), default=None)
        check(skew is not None and skew < 0.5,
              f"{label}: ranks' time_s agree step by step (largest difference {skew} s)")
        # Rank 0 folds the ranks' (and shards') files into the run's summary and trace, as
        # `gradsync run` does.
        names = sorted(os.listdir(run_dir))
        check("summary.json" in names and "trace.json" in names,
              f"{label}: summary and trace written: {names}")
        if "summary.json" in names:
            summary = json.load(open(os.path.join(run_dir, "summary.json")))
            found = {k: summary.get(k) for k in ("run", "workers", "steps")}
            want = {"run": "external-2", "workers": WORKERS, "steps": STEPS}
            check(found == want, f"{label}: summary.json of the whole run {want}, found {found}")
        if "trace.json" in names:
            # Every rank's spans, merged: one compute span per rank per step (the default
            # output.trace_steps, 200, covers all 40), each rank a process of its own (pid).
            events = json.load(open(os.path.join(run_dir, "trace.json")))["traceEvents"]
            spans = sorted((e["pid"], e["args"]["step"]) for e in events
                           if e.get("ph") == "X" and e["name"] == "compute")
            want = [(r, s) for r in range(WORKERS) for s in range(STEPS)]
            check(spans == want,
                  f"{label}: trace.json holds compute spans for steps 0..{STEPS - 1} of ranks "
                  f"0..{WORKERS - 1} ({len(want)}), found {len(spans)} of ranks "
                  f"{sorted({t for t, _ in spans})}")
        check(not any(n.startswith(("rank", "server")) or ".rank" in n for n in names),
              f"{label}: per-process files folded and removed: {names}")


# Either rank may come late: allreduce's initial broadcast is a barrier, and so is a ps run's
# first exchange (its shards answer nothing until every worker said HELLO).
run_by_hand(CONFIG, "allreduce", late=0)
run_by_hand(PS_CONFIG, "ps", late=1)

# gradsync run hands rank 0 its store socket already listening (GRADSYNC_STORE_FD); anything
# else in that variable is refused in one line naming it.
with tempfile.TemporaryDirectory() as run_dir:
    config = os.path.join(run_dir, "config.yaml")
    with open(config, "w") as f:
        f.write(CONFIG)
    for value in ("abc", "1"):
        env = dict(os.environ, RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(free_port()), GRADSYNC_STORE_FD=value)
        done = subprocess.run([gradsync, "worker", "--config", config, "--run-dir", run_dir],
                              env=env, capture_output=True, text=True, timeout=60)
        last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
        check(done.returncode != 0 and "GRADSYNC_STORE_FD" in last and value in last,
              f"GRADSYNC_STORE_FD={value}: refused naming the variable: {last!r}")
    # And a shard's, GRADSYNC_SHARD_FD.
    with open(config, "w") as f:
        f.write(PS_CONFIG)
    env = dict(os.environ, GRADSYNC_SHARD_FD="abc")
    done = subprocess.run([gradsync, "server", "--config", config, "--run-dir", run_dir,
                           "--shard", "0", "--port", str(free_port())],
                          env=env, capture_output=True, text=True, timeout=60)
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    check(done.returncode != 0 and "GRADSYNC_SHARD_FD" in last,
          f"GRADSYNC_SHARD_FD=abc: refused naming the variable: {last!r}")

check.finish()
