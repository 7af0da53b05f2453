"""The PyTorch MLP peer, run the way docs/cpu-kernels.md's figure is made:
scripts/bench-mlp-vs-pytorch.sh times gradsync's CPU step and the same MLP in Debian's
python3-torch (one thread, its BLAS) in turn, one short pair at batch 64. Checks that both sides
really trained, that gradsync says which kernels it ran with their share of the measured peak,
and that the ratio printed is theirs. No speed is asserted here: the figure is the script's.
Skips (77) without torch.
"""
import re
import subprocess
import sys

from checks import Checks

gradsync, script = sys.argv[1], sys.argv[2]
if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode:
    print("python3-torch not installed: skipped")
    sys.exit(77)

check = Checks()
done = subprocess.run(["bash", script, "--pairs", "1", "--seconds", "1", "--gradsync", gradsync],
                      capture_output=True, text=True, timeout=280)
out = done.stdout + done.stderr
check(done.returncode == 0, f"the script exited {done.returncode}: {out[-3000:]}")
pair = re.search(r"batch 64 pair 1: gradsync\s+(\d+) samples/s\s+pytorch\(([^)]*)\)\s+(\d+) "
                 r"samples/s\s+ratio ([\d.]+)x", out)
check(pair is not None, f"a pair line at batch 64: {out[-2000:]}")
if pair:
    ours, blas, theirs, ratio = pair.groups()
    print(pair.group(0))
    check(int(ours) > 0 and int(theirs) > 0, "both sides trained")
    check(blas != "", "PyTorch says which BLAS it ran on")
    check(abs(float(ratio) - int(ours) / int(theirs)) < 0.01,
          f"the ratio {ratio} is gradsync's samples/s over PyTorch's ({ours} / {theirs})")
ours_line = subprocess.run([gradsync, "bench", "mlp", "--seconds", "0.5"], capture_output=True,
                           text=True, timeout=60).stdout
check(re.search(r"path=(avx512|avx2|portable) gemm=\S+ isa=\S+ gflops=[\d.]+ "
                r"peak_gflops=[\d.]+ peak_share=\d+%", ours_line) is not None,
      f"gradsync's line carries its kernels and ceiling: {ours_line.strip()}")
check(re.search(r"median ratio gradsync / pytorch \(cpu, batch 64\): [\d.]+x over 1 pairs", out)
      is not None, "the median line")
check.finish()
