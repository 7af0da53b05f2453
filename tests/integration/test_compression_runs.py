"""comm.compression and zero end to end, under `gradsync run` (4 worker processes over tcp):

1. fp16 and bf16 put half the bytes of `none` through the busiest node (16 bits a value, plus
   the uncompressed warm-up steps and the first broadcast), PowerSGD at rank 2 under a quarter,
   top-k at 10% under 60% (its allgather costs N ratio of the ring); fp16 and bf16 end within
   1% test accuracy of none.
2. zero stages 1 and 2 follow the allreduce run: the same test loss to 1e-5 and the same bytes
   (the padding aside), with a quarter of its optimizer state per rank, measured.
3. plots/plot_compression.py draws accuracy against bytes and time from the results.
"""
import json
import os
import subprocess
import sys
import tempfile

from checks import Checks, run_preset

gradsync, preset, plot = sys.argv[1], sys.argv[2], sys.argv[3]
check = Checks()
with tempfile.TemporaryDirectory() as out:
    proc, top = run_preset(check, gradsync, preset, out, timeout=240)
    s = {run: json.load(open(os.path.join(top, run, "summary.json")))
         for run in ["none", "fp16", "bf16", "powersgd", "topk", "zero1", "zero2"]}
    moved = {run: s[run]["busiest_node"]["bytes"] for run in s}
    for run in ["fp16", "bf16"]:
        share = moved[run] / moved["none"]
        check(0.5 <= share <= 0.6, f"{run}: {share:.3f} of none's bytes, 16 bits a value")
        gap = abs(s[run]["final_test_accuracy"] - s["none"]["final_test_accuracy"])
        check(gap <= 0.01, f"{run}: accuracy within 1% of none ({gap:.4f})")
    check(moved["powersgd"] / moved["none"] < 0.25,
          f"powersgd: {moved['powersgd'] / moved['none']:.3f} of none's bytes")
    check(moved["topk"] / moved["none"] < 0.6,
          f"topk: {moved['topk'] / moved['none']:.3f} of none's bytes")
    for run in ["zero1", "zero2"]:
        loss, reference = s[run]["final_test_loss"], s["none"]["final_test_loss"]
        check(abs(loss - reference) <= 1e-5 * abs(reference),
              f"{run}: test loss {loss} against allreduce's {reference}")
        share = moved[run] / moved["none"]
        check(0.99 <= share <= 1.02, f"{run}: {share:.4f} of allreduce's bytes")
        ours = s[run]["peak_model_state_bytes_by_kind"]["optimizer"]
        theirs = s["none"]["peak_model_state_bytes_by_kind"]["optimizer"]
        check(abs(ours - theirs / 4) <= 0.01 * theirs,
              f"{run}: optimizer state {ours} bytes a rank, a quarter of allreduce's {theirs}")
    drawn = subprocess.run([sys.executable, plot, top], capture_output=True, text=True,
                           timeout=120)
    check(drawn.returncode == 0, f"plot_compression.py ran: {drawn.stderr[-2000:]}")
    check(os.path.getsize(os.path.join(top, "plots", "compression.png")) > 10000,
          "compression.png drawn")
check.finish()
