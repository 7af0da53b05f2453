"""`gradsync worker` under the launchers people already have, each the real tool:

1. torchrun (Debian's python3-torch) at 2 and 4 processes, for allreduce and for ps (whose last
   ps.servers ranks become its shards): its agent serves its own store on MASTER_PORT, so
   gradsync's store takes the next port; no run folder is prepared: rank 0 makes one under
   output.dir as `gradsync run` would, and the others write into it. Also under its c10d
   rendezvous.
2. mpirun (Open MPI) -np 4 with `gradsync worker quickstart --only allreduce-4`: no folder, no
   MASTER_ADDR or MASTER_PORT (both defaulted on one host).

Each run's final parameters (its last-step checkpoint) equal those of `gradsync run` of the
same preset and world size within 1e-5, and metrics.csv holds one row per rank per step.
"""
import csv
import os
import shutil
import subprocess
import sys
import tempfile

from checks import Checks, last_step_params, max_rel_diff, free_port

gradsync, preset = sys.argv[1], sys.argv[2]
DEBIAN_PYTHON = "/usr/bin/python3"  # torch is Debian's python3-torch, not any python3 on PATH
check = Checks()
# scripts/install-deps.sh installs both for `make test`: missing, they are a broken set-up, not
# a reason to skip.
for tool, found in [("torchrun (Debian's python3-torch)",
                     subprocess.run([DEBIAN_PYTHON, "-c", "import torch"],
                                    capture_output=True).returncode == 0),
                    ("mpirun (openmpi-bin)", shutil.which("mpirun") is not None)]:
    if not found:
        sys.exit(f"test_launchers: {tool} is not installed (scripts/install-deps.sh installs it)")



def run_ok(label, argv, timeout=240, env=None):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    check(proc.returncode == 0, f"{label}: exited {proc.returncode}: "
                                f"{(proc.stdout + proc.stderr)[-3000:]}")
    return proc


def reference(out, preset_arg, run, *sets):
    """The same run under `gradsync run`: its run folder."""
    run_ok(f"gradsync run {preset_arg} --only {run} {' '.join(sets)}",
           [gradsync, "run", preset_arg, "--only", run, "--output", out, *sets])
    return os.path.join(os.path.realpath(os.path.join(out, "latest")), run)


def compare(label, run_dir, reference_dir, workers, steps):
    rows = list(csv.DictReader(open(os.path.join(run_dir, "metrics.csv"))))
    check(len(rows) == steps * workers,
          f"{label}: one metrics row per rank per step: {len(rows)}, expected {steps * workers}")
    check(os.path.exists(os.path.join(run_dir, "summary.json")),
          f"{label}: rank 0 wrote summary.json")
    diff = max_rel_diff(last_step_params(check, run_dir, steps),
                        last_step_params(check, reference_dir, steps))
    check(diff <= 1e-5, f"{label}: final parameters as under gradsync run (max rel diff {diff:g})")


def under_torchrun(out, run, processes, rendezvous="static"):
    """`run` of the preset as `processes` ranks; ps keeps its last one as the shard. The static
    rendezvous is torchrun's default; c10d is its elastic one (an agent store of its own at the
    rendezvous endpoint, MASTER_PORT a free port it picks)."""
    steps = 60
    workers = processes - 1 if run == "ps" else processes
    ref = reference(os.path.join(out, "ref"), preset, run, "--set", f"workers={workers}")
    logs = os.path.join(out, "torchrun-logs")
    mine = os.path.join(out, "torchrun")
    # -r 1 -t 2: Debian's torch 1.13 under Python 3.11 crashes on its default redirects/tee.
    where = (["--master_port", str(free_port())] if rendezvous == "static" else
             ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{free_port()}"])
    run_ok(f"torchrun --nproc_per_node={processes} ({run}, {rendezvous} rendezvous)",
           [DEBIAN_PYTHON, "-m", "torch.distributed.run", f"--nproc_per_node={processes}",
            "-r", "1", "-t", "2", "--log_dir", logs, *where,
            "--no_python", gradsync, "worker", preset, "--only", run,
            "--set", f"output.dir={mine}"])
    run_dir = os.path.join(os.path.realpath(os.path.join(mine, "latest")), run)
    compare(f"torchrun x{processes} {run} ({rendezvous})", run_dir, ref, workers, steps)


def under_mpirun(out):
    steps = 40
    sets = ["--set", f"train.steps={steps}", "--set", f"checkpoint.every={steps}",
            "--set", "output.progress=off"]
    ref = reference(os.path.join(out, "ref"), "quickstart", "allreduce-4", *sets)
    mine = os.path.join(out, "mpirun")
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    run_ok("mpirun -np 4",
           ["mpirun", *root, "-np", "4", "--oversubscribe", gradsync, "worker", "quickstart",
            "--only", "allreduce-4", *sets, "--set", f"output.dir={mine}"], env=env)
    run_dir = os.path.join(os.path.realpath(os.path.join(mine, "latest")), "allreduce-4")
    compare("mpirun -np 4", run_dir, ref, 4, steps)


for run in ("ring", "ps"):
    for processes in (2, 4):
        with tempfile.TemporaryDirectory() as out:
            under_torchrun(out, run, processes)
with tempfile.TemporaryDirectory() as out:
    under_torchrun(out, "ring", 2, rendezvous="c10d")
with tempfile.TemporaryDirectory() as out:
    under_mpirun(out)
check.finish()
