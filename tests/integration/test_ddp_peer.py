"""The PyTorch DDP peer, run the way the README's figure is made: scripts/bench-ddp-vs-gradsync.sh
trains the same MLP with gradsync's allreduce (tcp) and with DDP over gloo under torchrun
(Debian's python3-torch), one short pair at N = 2 for each --compression: none, fp16
(fp16_compress_hook on DDP's side) and powersgd (powerSGD_hook), and one for --strategy zero
(gradsync's zero stage 1 against DDP with ZeroRedundancyOptimizer). Checks that both sides
really trained (samples/s and a compute/communication split from each), that DDP reports the
hook and optimizer the pair asked for, and that the ratio printed is theirs. No speed is
asserted here: the figure is the script's, in docs/benchmarks.md. Skips (77) without torch.
"""
import re
import subprocess
import sys

from checks import Checks

gradsync, script = sys.argv[1], sys.argv[2]
if subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed.run"],
                  capture_output=True).returncode != 0:
    print("python3-torch not installed: skipped")
    sys.exit(77)

check = Checks()
# 60 steps: PowerSGD's warm-up (--start-step, 10 by default) is over well before the end on
# gradsync's side and before the timed window on DDP's (torch_ddp.py warms up 50 steps).
out = ""
for args in (["--compression", "none,fp16,powersgd", "--steps", "60"],
             # zero's pair shorter, so that the whole test stays within about a minute.
             ["--strategy", "zero", "--steps", "30"]):
    done = subprocess.run(["bash", script, "--ranks", "2", "--backend", "tcp", "--pairs", "1",
                           "--gradsync", gradsync] + args,
                          capture_output=True, text=True, timeout=280)
    out += done.stdout + done.stderr
    check(done.returncode == 0, f"the script {args} exited {done.returncode}: {out[-3000:]}")
for strategy, compression, ours_label, ddp in (
        ("allreduce", "none", "gradsync", "ddp-gloo"),
        ("allreduce", "fp16", "gradsync", "ddp-gloo\\+fp16"),
        ("allreduce", "powersgd", "gradsync", "ddp-gloo\\+powersgd"),
        ("zero", "none", "gradsync/zero1", "ddp-gloo/zero")):
    pair = re.search(rf"N 2 {strategy}\s+tcp\s+{compression}\s+pair 1: {ours_label}\s+(\d+) "
                     rf"samples/s \(compute "
                     rf"([\d.]+) ms, comm ([\d.]+) ms\)\s+{ddp}\(([^)]*)\)\s+(\d+) samples/s "
                     r"\(compute ([\d.]+) ms, comm ([\d.]+) ms\)\s+ratio ([\d.]+)x", out)
    check(pair is not None,
          f"a pair line for N 2 {strategy} tcp {compression} against {ddp}: {out[-2000:]}")
    if pair:
        ours, our_compute, _, blas, theirs, their_compute, _, ratio = pair.groups()
        print(pair.group(0))
        check(int(ours) > 0 and float(our_compute) > 0,
              f"{strategy}, {compression}: gradsync trained and timed its compute")
        check(int(theirs) > 0 and float(their_compute) > 0,
              f"{strategy}, {compression}: DDP trained and timed its compute")
        check(blas != "", "DDP says which BLAS it ran on")  # OpenBLAS with the --bench packages
        check(abs(float(ratio) - int(ours) / int(theirs)) < 0.01,
              f"{strategy}, {compression}: the ratio {ratio} is gradsync's samples/s over DDP's "
              f"({ours} / {theirs})")
    check(re.search(rf"median ratio gradsync/ddp \({strategy}, tcp, {compression}, N = 2, "
                    r"batch \d+, MLP 784-256-256-10\): [\d.]+x over 1 pairs", out) is not None,
          f"the median line for {strategy}, {compression}")
check.finish()
