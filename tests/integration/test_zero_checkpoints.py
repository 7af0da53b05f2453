"""zero's checkpoints: every rank writes its own slices (rank 0 the tails too) as the parts of a
step folder, and those parts resume any strategy at any N, and the other way round.

1. zero-2 (stage 2) trained 80 steps with checkpoints every 40: the step-40 folder holds parts
   from both ranks that tile the buffer, and the run ends where allreduce-2 does (1e-5).
2. allreduce-2 resumed from zero-2's step 40 and zero-2 from allreduce-2's end at step 80 where
   the uninterrupted runs of their own do (1e-5 of each value), zero-3 (stage 1, another
   slicing) from its own step 40 too; zero-3 from zero-2's step 40 ends within 1e-5 of the
   largest weight of its own run (N = 3 and N = 2 round the ranks' partial means differently:
   a small weight may differ by 4e-4 of itself after 80 steps, either way).
3. Stage 3 (parameters sharded, each rank writing its slices of every layer): zero3-2 ends
   where allreduce-2 does; allreduce-2 resumed from zero3-2's step 40 and zero3-2 from
   allreduce-2's where their own runs do; zero3-4 from zero3-2's step 40 and from zero-3's
   (stage 1 at N = 3) within 1e-5 of the largest weight of its own run.
"""
import glob
import os
import subprocess
import sys
import tempfile

from checks import Checks, last_step_params, max_rel_diff, run_preset

gradsync, preset = sys.argv[1], sys.argv[2]
check = Checks()


def relative_to_largest(a, b):
    if len(a) != len(b) or not a:
        return float("inf")
    return max(abs(x - y) for x, y in zip(a, b)) / max(abs(y) for y in b)


def run(out, *args):
    proc = subprocess.run([gradsync, "run", preset, "--output", out, *args], capture_output=True,
                          text=True, timeout=120)
    check(proc.returncode == 0, f"gradsync run {' '.join(args)}: {proc.stderr[-2000:]}")
    return os.path.realpath(os.path.join(out, "latest"))


with tempfile.TemporaryDirectory() as out:
    top = run(out)
    zero, ring = os.path.join(top, "zero-2"), os.path.join(top, "allreduce-2")
    parts = sorted(glob.glob(os.path.join(zero, "checkpoints", "step-00000040", "part-*.ckpt")))
    check(len(parts) >= 4, f"zero-2's step 40: a part per slice of each unit, got {len(parts)}")
    reference = last_step_params(check, ring, 80)
    diff = max_rel_diff(last_step_params(check, zero, 80), reference)
    check(diff <= 1e-5, f"zero-2 ends where allreduce-2 does: {diff:.2e}")

    step40_zero = os.path.join(zero, "checkpoints", "step-00000040")
    step40_ring = os.path.join(ring, "checkpoints", "step-00000040")
    step40_zero3 = os.path.join(top, "zero-3", "checkpoints", "step-00000040")
    full = os.path.join(top, "zero3-2")
    diff = max_rel_diff(last_step_params(check, full, 80), reference)
    check(diff <= 1e-5, f"zero3-2 ends where allreduce-2 does: {diff:.2e}")
    step40_full = os.path.join(full, "checkpoints", "step-00000040")
    parts = glob.glob(os.path.join(step40_full, "part-*.ckpt"))
    check(len(parts) >= 6, f"zero3-2's step 40: a part per slice of each layer, got {len(parts)}")
    for run_name, folder, label, metric in [
            ("allreduce-2", step40_zero, "zero-2's", max_rel_diff),
            ("zero-2", step40_ring, "allreduce-2's", max_rel_diff),
            ("zero-3", step40_zero3, "its own", max_rel_diff),
            ("zero-3", step40_zero, "zero-2's", relative_to_largest),
            ("allreduce-2", step40_full, "zero3-2's", max_rel_diff),
            ("zero3-2", step40_ring, "allreduce-2's", max_rel_diff),
            ("zero3-4", step40_full, "zero3-2's", relative_to_largest),
            ("zero3-4", step40_zero3, "zero-3's", relative_to_largest)]:
        resumed = run(os.path.join(out, run_name + label[:-2]), "--only", run_name, "--resume",
                      folder)
        own = last_step_params(check, os.path.join(top, run_name), 80)
        diff = metric(last_step_params(check, os.path.join(resumed, run_name), 80), own)
        check(diff <= 1e-5, f"{run_name} resumed from {label} checkpoint: {diff:.2e}")
check.finish()
