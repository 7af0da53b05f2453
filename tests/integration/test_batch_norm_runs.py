"""Batch norm's running statistics through the real executable, under every strategy
(README, "Batch norm under each strategy"), on a tiny ResNet:

1. Every step folder of a ResNet run holds buffers.bin (common/checkpoint_buffers.h) beside its
   parts, of the parts' step; a run stopped after step 8 and resumed from its step-6 checkpoint
   ends (step 12) with the parameters and running statistics of an uninterrupted run, bit for
   bit (ps: within 1e-6, its shards sum pushes in arrival order).
2. dp and allreduce (per-rank statistics) end alike, bit for bit; with model.sync_batchnorm
   allreduce and zero end within 1e-4 of single on the global batch, and per-rank statistics
   do not.
3. A ResNet checkpoint whose buffers.bin is gone is refused with one line naming the file.
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

from checks import Checks, load_checkpoint, max_rel_diff

gradsync, preset = sys.argv[1], sys.argv[2]
check = Checks()
RUNS = ["single", "dp-2", "allreduce-2", "allreduce-2-own", "allreduce-2-sync", "zero-2-sync",
        "ps-2"]


def gradsync_run(*args, timeout=240):
    return subprocess.run([gradsync, "run", preset, *args], capture_output=True, text=True,
                          timeout=timeout)


def run_ok(out, *args):
    proc = gradsync_run("--output", out, *args)
    check(proc.returncode == 0, f"gradsync run {' '.join(args)} exited {proc.returncode}: "
                                f"{proc.stderr[-2000:]}")
    return os.path.realpath(os.path.join(out, "latest"))


def load_buffers(folder):
    """(step, values) of a step folder's buffers.bin, or (None, None) without one."""
    path = os.path.join(folder, "buffers.bin")
    if not os.path.exists(path):
        return None, None
    data = open(path, "rb").read()
    check(data[:13] == b"gradsync-bufs", f"{path}: magic")
    (length,) = struct.unpack_from("<I", data, 20)
    step, count = struct.unpack_from("<2Q", data, 24)
    return step, list(struct.unpack_from(f"<{count}f", data, 40 + length))


def step_folder(run_dir, run, step):
    return os.path.join(run_dir, run, "checkpoints", f"step-{step:08d}")


with tempfile.TemporaryDirectory() as tmp:
    full = run_ok(os.path.join(tmp, "full"))
    stopped = run_ok(os.path.join(tmp, "stopped"), "--set", "train.steps=8")
    end = {}
    for run in RUNS:
        for step in (6, 12):
            folder = step_folder(full, run, step)
            part_step, params = load_checkpoint(folder)
            buffer_step, buffers = load_buffers(folder)
            check(part_step == buffer_step == step and len(params) > 0 and buffers,
                  f"{run}: step {step} holds its parts and buffers.bin of that step "
                  f"({part_step}, {buffer_step})")
        end[run] = (load_checkpoint(step_folder(full, run, 12))[1],
                    load_buffers(step_folder(full, run, 12))[1])

    # 1. Resumed from step 6, each ends where the uninterrupted run does.
    for run in RUNS:
        resumed = run_ok(os.path.join(tmp, "resumed-" + run), "--only", run, "--resume",
                         step_folder(stopped, run, 6))
        params = load_checkpoint(step_folder(resumed, run, 12))[1]
        buffers = load_buffers(step_folder(resumed, run, 12))[1]
        if run == "ps-2":
            diff = max(max_rel_diff(params, end[run][0]), max_rel_diff(buffers, end[run][1]))
            check(diff <= 1e-6, f"{run}: resumed differs from uninterrupted by {diff:g}")
        else:
            check(params == end[run][0], f"{run}: resumed parameters are the uninterrupted ones")
            check(buffers == end[run][1],
                  f"{run}: resumed running statistics are the uninterrupted ones")

    # 2. Which trajectory each recipe follows.
    check(end["dp-2"] == end["allreduce-2"], "dp and allreduce keep the same statistics")
    check(end["allreduce-2-own"][0] == end["allreduce-2"][0],
          "broadcast_buffers changes no parameter (only evaluation reads the statistics)")
    for run in ["allreduce-2-sync", "zero-2-sync"]:
        diff = max_rel_diff(end[run][1], end["single"][1])
        check(diff <= 1e-4, f"{run}: running statistics within 1e-4 of single's, {diff:g}")
    diff = max_rel_diff(end["allreduce-2"][1], end["single"][1])
    check(diff > 1e-3, f"per-rank statistics differ from single's: {diff:g}")

    # 3. A checkpoint that lost its running statistics.
    bad = os.path.join(tmp, "bad", "step-00000006")
    shutil.copytree(step_folder(stopped, "allreduce-2", 6), bad)
    os.remove(os.path.join(bad, "buffers.bin"))
    proc = gradsync_run("--output", os.path.join(tmp, "refused"), "--only", "allreduce-2",
                        "--resume", bad)
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    check(proc.returncode != 0 and os.path.join(bad, "buffers.bin") in last and
          "missing" in last, f"a checkpoint without buffers.bin is refused naming it: {last!r}")

check.finish()
