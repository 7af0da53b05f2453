"""Checkpoints and `gradsync run --resume`, through the real executable, for every synchronous
strategy (single, dp, allreduce, ps sync):

1. A run stopped after step 60 and resumed from its step-50 checkpoint ends (step 80) with the
   same parameters as an uninterrupted 80-step run (max relative difference <= 1e-6); the
   resumed run names that checkpoint in its config.yaml, its metrics, summary and trace hold
   exactly steps 50..79. `--resume` of a whole results folder finds each run's newest checkpoint
   (step 60), starts there and ends where the uninterrupted run does too.
2. A checkpoint that is truncated, corrupted or of another model is refused with one line naming
   the file, a non-zero exit, and is left byte for byte as it was.
3. A run killed with SIGKILL mid-run keeps every metrics row and checkpoint written before, and
   resumes from the newest complete checkpoint.
"""
import csv
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from checks import Checks, load_checkpoint, max_rel_diff

gradsync, preset = sys.argv[1], sys.argv[2]
check = Checks()
RUNS = ["single", "dp-2", "allreduce-2", "ps-2"]
WORKERS = {"single": 1, "dp-2": 2, "allreduce-2": 2, "ps-2": 2}
# output.trace_steps of the preset: a run traces its first that many steps, from where it starts.
TRACE_STEPS = int(re.search(r"trace_steps:\s*(\d+)", open(preset).read()).group(1))


def gradsync_run(*args, timeout=120):
    return subprocess.run([gradsync, "run", preset, *args], capture_output=True, text=True,
                          timeout=timeout)


def run_ok(out, *args):
    proc = gradsync_run("--output", out, *args)
    check(proc.returncode == 0, f"gradsync run {' '.join(args)} exited {proc.returncode}: "
                                f"{proc.stderr[-2000:]}")
    return os.path.realpath(os.path.join(out, "latest"))


def resumed_from(run_dir):
    """checkpoint.resume in a run's config.yaml: the canonical step folder it resumed from
    (experiments/run_experiment.cpp resolves --resume to it), or "" for a fresh run."""
    config = open(os.path.join(run_dir, "config.yaml")).read()
    m = re.search(r"^checkpoint:\n(?:  .*\n)*?  resume: (.*)$", config, re.MULTILINE)
    return m.group(1).strip('"') if m else None


def check_resumed(label, run_dir, workers, folder, first, last):
    """A run that ignored --resume trains deterministically to the same parameters, so these
    are the evidence that it resumed: config.yaml names the checkpoint's step folder, and
    metrics.csv and summary.json hold exactly the steps first..last-1, once per rank."""
    missing = [n for n in ("config.yaml", "metrics.csv", "summary.json")
               if not os.path.exists(os.path.join(run_dir, n))]
    if missing:
        check(False, f"{label}: {run_dir} holds config.yaml, metrics.csv and summary.json; "
                     f"missing {missing}")
        return
    named = resumed_from(run_dir)
    check(named == os.path.realpath(folder),
          f"{label}: config.yaml resumes {os.path.realpath(folder)}, found {named!r}")
    rows = list(csv.DictReader(open(os.path.join(run_dir, "metrics.csv"))))
    found = sorted((int(r["step"]), int(r["rank"])) for r in rows)
    want = [(s, r) for s in range(first, last) for r in range(workers)]
    check(found == want,
          f"{label}: metrics.csv holds steps {first}..{last - 1} for {workers} rank(s) "
          f"({len(want)} rows), found {len(found)} rows from step "
          f"{found[0][0] if found else None} to {found[-1][0] if found else None}")
    steps = json.load(open(os.path.join(run_dir, "summary.json")))["steps"]
    check(steps == last - first, f"{label}: summary.json steps {last - first}, found {steps}")


def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


with tempfile.TemporaryDirectory() as tmp:
    full = run_ok(os.path.join(tmp, "full"))
    stopped = run_ok(os.path.join(tmp, "stopped"), "--set", "train.steps=60")
    for run in RUNS:
        steps = sorted(os.listdir(os.path.join(stopped, run, "checkpoints")))
        check(steps == ["step-00000050", "step-00000060"], f"{run}: checkpoints {steps}")
        parts = os.listdir(os.path.join(stopped, run, "checkpoints", "step-00000050"))
        want = ["part-0-of-2.ckpt", "part-1-of-2.ckpt"] if run == "ps-2" else ["part-0-of-1.ckpt"]
        want.append("training.txt")  # the settings it trained with
        check(sorted(parts) == want, f"{run}: parts {parts}, expected {want}")

    # 1. Resume each run from its step-50 checkpoint.
    for run in RUNS:
        step50 = os.path.join(stopped, run, "checkpoints", "step-00000050")
        resumed = run_ok(os.path.join(tmp, "resumed-" + run), "--only", run, "--resume", step50)
        step_a, a = load_checkpoint(os.path.join(full, run, "checkpoints", "step-00000080"))
        step_b, b = load_checkpoint(os.path.join(resumed, run, "checkpoints", "step-00000080"))
        check(step_a == step_b == 80 and len(a) == len(b) > 0,
              f"{run}: both end at step 80 with the model's parameters: steps {step_a}, "
              f"{step_b}, {len(a)} and {len(b)} values")
        diff = max_rel_diff(a, b)
        check(diff <= 1e-6, f"{run}: resumed parameters differ from uninterrupted by {diff:g}")
        check_resumed(run, os.path.join(resumed, run), WORKERS[run], step50, 50, 80)
        # The trace counts its steps from where the run starts: one compute span per rank for
        # each of steps 50..50+TRACE_STEPS-1 (each rank is a process, pid), none before.
        trace = json.load(open(os.path.join(resumed, run, "trace.json")))
        spans = sorted((e["pid"], e["args"]["step"]) for e in trace["traceEvents"]
                       if e.get("ph") == "X" and e["name"] == "compute")
        want = [(r, s) for r in range(WORKERS[run]) for s in range(50, 50 + TRACE_STEPS)]
        check(spans == want, f"{run}: compute spans (rank, step) {want[0]}..{want[-1]}, "
                             f"{len(want)} in all; found {len(spans)}: {spans[:3]}..{spans[-3:]}")

    # Resuming under other settings is allowed, and said in one line naming what changed; the
    # same settings say nothing.
    for run in ["dp-2", "ps-2"]:
        step50 = os.path.join(stopped, run, "checkpoints", "step-00000050")
        same = gradsync_run("--output", os.path.join(tmp, "same-" + run), "--only", run,
                            "--resume", step50)
        check(same.returncode == 0 and "other settings" not in same.stderr,
              f"{run}: a resume with the same settings notes nothing: {same.stderr[-500:]}")
        other = gradsync_run("--output", os.path.join(tmp, "other-" + run), "--only", run,
                             "--resume", step50, "--set", "train.lr=0.0125")
        check(other.returncode == 0 and
              re.search(r"resumes \S+step-00000050 with other settings: train\.lr \S+ -> 0\.0125",
                        other.stderr) is not None,
              f"{run}: a resume with another lr says so: {other.stderr[-500:]}")

    # `--resume <root>/latest` into the same results root: `latest` is the stopped run until the
    # new one has found its checkpoints; each run resumes from its newest (step 60).
    resumed = run_ok(os.path.join(tmp, "stopped"), "--resume",
                     os.path.join(tmp, "stopped", "latest"))
    check(resumed != stopped, "the resumed run has a results folder of its own")
    for run in RUNS:
        step60 = os.path.join(stopped, run, "checkpoints", "step-00000060")
        check_resumed(f"{run} from latest", os.path.join(resumed, run), WORKERS[run], step60,
                      60, 80)
        _, a = load_checkpoint(os.path.join(full, run, "checkpoints", "step-00000080"))
        _, b = load_checkpoint(os.path.join(resumed, run, "checkpoints", "step-00000080"))
        check(len(a) == len(b) > 0, f"{run}: both hold the model's parameters ({len(a)}, {len(b)})")
        diff = max_rel_diff(a, b)
        check(diff <= 1e-6, f"{run}: resumed from step 60, parameters differ by {diff:g}")

    # A named checkpoint.dir: each run below its own name; running again would overwrite them.
    named = os.path.join(tmp, "named-ckpt")
    run_ok(os.path.join(tmp, "named"), "--only", "single", "--set", f"checkpoint.dir={named}",
           "--set", "train.steps=60")
    check(sorted(os.listdir(os.path.join(named, "single"))) == ["step-00000050", "step-00000060"],
          "checkpoint.dir/<run>/step-* written")
    before = digest(os.path.join(named, "single", "step-00000060", "part-0-of-1.ckpt"))
    again = gradsync_run("--output", os.path.join(tmp, "named"), "--only", "single", "--set",
                         f"checkpoint.dir={named}", "--set", "train.steps=60")
    check(again.returncode != 0 and "already holds step-" in again.stderr,
          f"a rerun into a used checkpoint.dir is refused: {again.stderr.strip()[-300:]!r}")
    check(digest(os.path.join(named, "single", "step-00000060", "part-0-of-1.ckpt")) == before,
          "and the checkpoints there are left as they were")
    # Resuming from the newest there, into the same folder, is what it is for.
    into = run_ok(os.path.join(tmp, "named"), "--only", "single", "--set",
                  f"checkpoint.dir={named}", "--set", "train.steps=80", "--resume",
                  os.path.join(named, "single") + "/")
    check("step-00000080" in os.listdir(os.path.join(named, "single")),
          "resumed into the same checkpoint.dir (a trailing slash is fine)")
    check_resumed("named checkpoint.dir", os.path.join(into, "single"), 1,
                  os.path.join(named, "single", "step-00000060"), 60, 80)

    # 2. Bad checkpoints are refused and left as they were.
    def refused(folder, file, expect, *extra):
        before = digest(file)
        proc = gradsync_run("--output", os.path.join(tmp, "refused"), "--only", "allreduce-2",
                            "--resume", folder, *extra)
        last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
        check(proc.returncode != 0, f"{expect}: refused with a non-zero exit ({proc.returncode})")
        check(file in last and expect in last, f"{expect}: one line naming the file: {last!r}")
        check(digest(file) == before, f"{expect}: the checkpoint is left as it was")

    bad = os.path.join(tmp, "bad")
    shutil.copytree(os.path.join(stopped, "allreduce-2", "checkpoints"), bad)
    part60 = os.path.join(bad, "step-00000060", "part-0-of-1.ckpt")
    part50 = os.path.join(bad, "step-00000050", "part-0-of-1.ckpt")
    data = bytearray(open(part60, "rb").read())
    data[len(data) // 2] ^= 0x40
    open(part60, "wb").write(data)
    refused(os.path.join(bad, "step-00000060"), part60, "CRC-32 mismatch")
    # The newest is corrupted: resuming the folder refuses it rather than silently going back.
    refused(bad, part60, "CRC-32 mismatch")
    open(part60, "wb").write(bytes(data[:1000]))
    refused(bad, part60, "truncated")
    refused(os.path.join(bad, "step-00000050"), part50, "another model",
            "--set", "model.hidden=[32]")

    # 3. SIGKILL mid-run (dp: the replicas are threads of the run's one process).
    out = os.path.join(tmp, "killed")
    victim = subprocess.Popen([gradsync, "run", preset, "--output", out, "--only", "dp-2",
                               "--set", "train.steps=1000000", "--set", "checkpoint.every=100"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpts = os.path.join(out, "latest", "dp-2", "checkpoints")
    deadline = time.time() + 60
    # Two complete checkpoints: a step folder exists a moment before its part is in it.
    while (time.time() < deadline and
           len(glob.glob(os.path.join(ckpts, "step-*", "part-0-of-1.ckpt"))) < 2):
        time.sleep(0.1)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    killed = os.path.realpath(os.path.join(out, "latest"))
    lines = open(os.path.join(killed, "dp-2", "metrics.csv")).read().splitlines()
    rows = list(csv.DictReader(lines))
    check(len(rows) >= 2 * 200, f"metrics.csv kept the rows before the kill ({len(rows)})")
    check(all(r["bytes_received"] not in (None, "") for r in rows[:-1]),
          "every row but perhaps the last is complete")
    # The newest complete one: the kill may have come between a later step folder and its part,
    # and resuming the run's folder must pass over that one.
    complete = [int(s.split("-")[1]) for s in os.listdir(ckpts) if s.startswith("step-") and
                os.path.exists(os.path.join(ckpts, s, "part-0-of-1.ckpt"))]
    check(len(complete) >= 2, f"two complete checkpoints before the kill: steps {sorted(complete)}")
    newest = max(complete, default=0)
    # As a kill between making a step folder and renaming its part in leaves it, every time.
    os.makedirs(os.path.join(ckpts, f"step-{newest + 100:08d}"), exist_ok=True)
    resumed = run_ok(os.path.join(tmp, "after-kill"), "--only", "dp-2", "--resume", killed,
                     "--set", f"train.steps={newest + 10}", "--set", "checkpoint.every=100")
    # Its last step writes a checkpoint whether or not it resumed: where it started is the proof.
    check_resumed("after the kill", os.path.join(resumed, "dp-2"), 2,
                  os.path.join(ckpts, f"step-{newest:08d}"), newest, newest + 10)
    step, params = load_checkpoint(
        os.path.join(resumed, "dp-2", "checkpoints", f"step-{newest + 10:08d}"))
    check(step == newest + 10 and len(params) > 0,
          f"resumed after the kill from step {newest} and ran to {step}")

check.finish()
