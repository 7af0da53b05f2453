"""`gradsync worker` under a real Slurm on this one host, started by scripts/slurm-one-host.sh:

1. `srun -n 4 --overcommit gradsync worker tiny_launchers.yaml --only ring --set workers=4`:
   no folder, no MASTER_ADDR or MASTER_PORT: every rank derives them from Slurm's variables
   (the node list's first host; 20000 + SLURM_JOB_ID % 10000), and rank 0 says so.
2. `sbatch --wait examples/slurm/train.sbatch` of the same run, the example as users copy it;
   sbatch's command line adds what one 2-core host needs (--nodes=1 --overcommit) and the
   job's name, time limit and output file.

Each run's final parameters (its last-step checkpoint) equal those of `gradsync run` of the
same preset at 4 workers within 1e-5, and metrics.csv holds one row per rank per step.

Skips (exit 77) only when not root: the script starts daemons as root and munge. As root, a
Slurm that does not start (not installed, a slurm.conf of someone else's) is a failure. Slurm is
stopped at the end, also after a failure; its logs stay in the script's state folder.
"""
import csv
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

from checks import Checks, last_step_params, max_rel_diff

# Absolute: the ranks run in a temporary folder.
gradsync, preset = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "slurm-one-host.sh")
SBATCH = os.path.join(ROOT, "examples", "slurm", "train.sbatch")
STATE = os.environ.get("GRADSYNC_SLURM_STATE", "/var/lib/gradsync-slurm")
WORKERS, STEPS = 4, 60  # tiny_launchers.yaml: 60 steps, a checkpoint at the last
JOB = f"gradsync-test-{os.getpid()}"
check = Checks()


def skip(reason):
    # 77: the test's SKIP_RETURN_CODE (tests/integration/CMakeLists.txt).
    print(f"skipped: {reason}")
    sys.exit(77)


def launcher_free_env(**extra):
    """This environment without any launcher's variables (a ctest run inside a Slurm job or
    under torchrun must not hand them to the ranks), so that the ranks' only source is the
    srun that starts them."""
    prefixes = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "OMPI_", "PMI_", "PMIX_", "TORCHELASTIC_")
    names = {"MASTER_ADDR", "MASTER_PORT", "GRADSYNC_STORE_PORT", "RANK", "WORLD_SIZE",
             "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}
    env = {k: v for k, v in os.environ.items() if k not in names and not k.startswith(prefixes)}
    env.update(extra)
    return env


def run(label, argv, timeout, **kwargs):
    """The finished process, or None (a failed check) when it outlived `timeout`."""
    started = time.time()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as e:
        # Bytes whatever text= said (subprocess's documentation), or None.
        out = "".join(part.decode(errors="replace") if isinstance(part, bytes) else part or ""
                      for part in (e.stdout, e.stderr))
        check(False, f"{label}: still running after {timeout} s: {out[-3000:]}")
        return None
    print(f"{label}: exit {proc.returncode} in {time.time() - started:.1f} s")
    check(proc.returncode == 0, f"{label}: exited {proc.returncode}: "
                                f"{(proc.stdout + proc.stderr)[-3000:]}")
    return proc


def reference(out):
    """The same run under `gradsync run` at the same world size (as test_launchers.py): its
    run folder, or None."""
    proc = run(f"gradsync run {os.path.basename(preset)} --set workers={WORKERS}",
               [gradsync, "run", preset, "--only", "ring", "--output", out,
                "--set", f"workers={WORKERS}"], timeout=60)
    if proc is None or proc.returncode != 0:
        return None
    return os.path.join(os.path.realpath(os.path.join(out, "latest")), "ring")


def compare(label, run_dir, reference_dir):
    """One metrics row per rank per step, rank 0's summary, and the final parameters of
    `gradsync run` within 1e-5."""
    metrics = os.path.join(run_dir, "metrics.csv")
    rows = list(csv.DictReader(open(metrics))) if os.path.exists(metrics) else []
    check(len(rows) == STEPS * WORKERS,
          f"{label}: one metrics row per rank per step: {len(rows)}, expected {STEPS * WORKERS}")
    check(os.path.exists(os.path.join(run_dir, "summary.json")),
          f"{label}: rank 0 wrote summary.json")
    diff = max_rel_diff(last_step_params(check, run_dir, STEPS),
                        last_step_params(check, reference_dir, STEPS))
    check(diff <= 1e-5, f"{label}: final parameters as under gradsync run (max rel diff {diff:g})")


def says_srun_placement(label, output, job_id):
    """Rank 0's line (launch/rendezvous_env.h's describe()): Slurm is its source, and the store
    is at the node list's first host (this one) on 20000 + job id % 10000."""
    host = socket.gethostname().split(".")[0]
    want = (f"rank 0 of {WORKERS} (local 0 of {WORKERS}, node 0) from srun, "
            f"store at {host}:{20000 + job_id % 10000}")
    check(want in output, f"{label}: rank 0 says {want!r}: {output[-2000:]}")


def job_id_by_name(name):
    """The id of the (finished) job named `name`: slurmctld keeps it for MinJobAge (300 s)."""
    proc = subprocess.run(["squeue", "-h", "-t", "all", "-n", name, "-o", "%i"],
                          capture_output=True, text=True, timeout=15)
    ids = proc.stdout.split()
    check(len(ids) == 1, f"squeue names one job {name}: {proc.stdout + proc.stderr}")
    return int(ids[0]) if len(ids) == 1 else -1


def under_srun(out, ref):
    mine = os.path.join(out, "srun")
    label = f"srun -n {WORKERS} --overcommit"
    # --time (minutes): Slurm's own bound on the job, besides the subprocess's.
    proc = run(label, ["srun", "-n", str(WORKERS), "--overcommit", "--time=1", "-J", JOB + "-srun",
                       gradsync, "worker", preset, "--only", "ring",
                       "--set", f"output.dir={mine}", "--set", f"workers={WORKERS}"],
               timeout=60, env=launcher_free_env(), cwd=out)
    if proc is None or proc.returncode != 0:
        return
    says_srun_placement(label, proc.stdout + proc.stderr, job_id_by_name(JOB + "-srun"))
    run_dir = os.path.join(os.path.realpath(os.path.join(mine, "latest")), "ring")
    compare(label, run_dir, ref)


def under_sbatch(out, ref):
    mine = os.path.join(out, "sbatch")
    log = os.path.join(out, "sbatch-%j.out")
    label = "sbatch --wait examples/slurm/train.sbatch"
    # The example's own #SBATCH lines ask for 2 nodes and 4 tasks; this host is one node with
    # 2 CPUs. The rest (GRADSYNC, the preset, the run, the options) as its header says.
    proc = run(label, ["sbatch", "--wait", "--nodes=1", "--overcommit", "--time=1", "-J", JOB,
                       f"--output={log}", SBATCH, preset, "ring", "--set", f"output.dir={mine}",
                       "--set", f"workers={WORKERS}"],
               timeout=60, env=launcher_free_env(GRADSYNC=gradsync), cwd=out)
    if proc is None:
        return
    found = re.search(r"Submitted batch job (\d+)", proc.stdout)
    check(found is not None, f"{label}: says the job's id: {proc.stdout!r}")
    if not found:
        return
    job_id = int(found.group(1))
    job_out = log.replace("%j", str(job_id))
    text = open(job_out).read() if os.path.exists(job_out) else ""
    check(text != "", f"{label}: the job wrote {job_out}")
    if proc.returncode != 0:
        print(f"{label}: the job's output:\n{text[-3000:]}")
        return
    says_srun_placement(label, text, job_id)
    run_dir = os.path.join(os.path.realpath(os.path.join(mine, "latest")), "ring")
    compare(label, run_dir, ref)


def under_scancel(out):
    """scancel's SIGTERM reaches the ranks of a running step at different steps: they stop after
    one agreed step with a checkpoint there, and `--resume auto` goes on to the parameters of a
    run never stopped (tiny_restart.yaml: 100 steps of 30 ms, 2 ranks)."""
    slow = os.path.join(os.path.dirname(preset), "tiny_restart.yaml")
    ref = run("gradsync run tiny_restart.yaml", [gradsync, "run", slow, "--output",
                                                 os.path.join(out, "ref-stop")], timeout=60)
    if ref is None or ref.returncode != 0:
        return
    ref_dir = os.path.join(os.path.realpath(os.path.join(out, "ref-stop", "latest")), "ring")
    mine, name = os.path.join(out, "scancel"), JOB + "-stop"
    argv = ["srun", "-n", "2", "--overcommit", "--time=1", "-J", name, gradsync, "worker", slow,
            "--set", f"output.dir={mine}"]
    step = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=launcher_free_env(), cwd=out)
    metrics = os.path.join(mine, "latest", "ring", "metrics.csv")
    deadline = time.time() + 30
    while time.time() < deadline and step.poll() is None:
        rows = open(metrics).read().splitlines()[1:] if os.path.exists(metrics) else []
        if any(int(r.split(",")[0]) >= 30 for r in rows if r.count(",") >= 10):
            break
        time.sleep(0.05)
    run("scancel -s TERM", ["scancel", "-s", "TERM", "-n", name], timeout=15)
    try:
        output, _ = step.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        step.kill()
        output, _ = step.communicate()
    stops = set(re.findall(r"SIGTERM: stopped after step (\d+) of 100 with every rank", output))
    check(len(stops) == 1 and len(re.findall("SIGTERM: stopped after", output)) == 2,
          f"scancel: both ranks stop after one agreed step: {output[-2000:]}")
    resumed = run("srun ... --resume auto", argv + ["--resume", "auto"], timeout=60,
                  env=launcher_free_env(), cwd=out)
    if resumed is None or resumed.returncode != 0:
        return
    run_dir = os.path.realpath(os.path.join(mine, "latest", "ring"))
    rows = list(csv.DictReader(open(os.path.join(run_dir, "metrics.csv"))))
    check(len(rows) == 100 * 2 and len({(r["step"], r["rank"]) for r in rows}) == 200,
          f"scancel then resume: one metrics row per rank per step ({len(rows)} rows)")
    diff = max_rel_diff(last_step_params(check, run_dir, 100),
                        last_step_params(check, ref_dir, 100))
    check(diff <= 1e-6, f"scancel then resume: final parameters as never stopped "
                        f"(max rel diff {diff:g})")


def tail_logs():
    for name in ("slurmctld.log", "slurmd.log", "munge/munged.log"):
        path = os.path.join(STATE, name)
        if os.path.exists(path):
            lines = open(path, errors="replace").read().splitlines()[-8:]
            print(f"--- {path} (last lines)\n" + "\n".join(lines))


if os.geteuid() != 0:
    skip("needs root: scripts/slurm-one-host.sh starts munged, slurmctld and slurmd")
# Every step is bounded, and the bounds add up to less than ctest's 300 s, which would kill this
# script before its `finally` stops the daemons: start 45 s (the script waits 30 s for the node),
# gradsync run, srun and sbatch 60 s each, stop 40 s, status and squeue 15 s each. A pass takes
# about 5 to 15 s (sbatch --wait polls the job every few seconds).
# A SIGTERM (a stopped ctest run) still runs the `finally` below; Ctrl-C already does.
signal.signal(signal.SIGTERM, lambda *_: sys.exit("test_slurm: terminated"))
started = time.time()
try:
    # The script bounds its own wait for the node (30 s); this bounds the script.
    up = run("slurm-one-host.sh start", ["bash", SCRIPT, "start"], timeout=45)
    if up is not None and up.returncode == 0:
        with tempfile.TemporaryDirectory() as out:
            ref = reference(os.path.join(out, "ref"))
            if ref is not None:
                under_srun(out, ref)
                under_sbatch(out, ref)
            under_scancel(out)
finally:
    if check.failures:
        tail_logs()
    run("slurm-one-host.sh stop", ["bash", SCRIPT, "stop"], timeout=40)
    status = subprocess.run(["bash", SCRIPT, "status"], capture_output=True, text=True, timeout=15)
    check(status.returncode == 3, f"no Slurm daemon left running: {status.stdout}")
print(f"test_slurm: {time.time() - started:.1f} s")
check.finish()
