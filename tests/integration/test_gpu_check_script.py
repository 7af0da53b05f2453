"""scripts/gpu-check.sh and its comparer, as far as a machine without a GPU can check them:
every GPU step says SKIP and why, the binary's GPU refusal is checked, usage errors exit 2,
and gpu_check_compare.py passes runs that follow the reference and fails one that does not.
On a machine with a GPU this test steps aside: run scripts/gpu-check.sh there."""
import os
import shutil
import subprocess
import sys
import tempfile

from checks import Checks

gradsync = os.path.abspath(sys.argv[1])
unit_tests = os.path.abspath(sys.argv[2])
repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
check = Checks()

if subprocess.run(["sh", "-c", "nvidia-smi -L"], capture_output=True).returncode == 0:
    print("skipped: this machine has a GPU; scripts/gpu-check.sh is the check there")
    sys.exit(77)

work = tempfile.mkdtemp(prefix="gpu-check-test-")
try:
    # A pack as scripts/gpu-pack.sh lays it out, from this build.
    pack = os.path.join(work, "pack")
    os.makedirs(os.path.join(pack, "bin"))
    os.makedirs(os.path.join(pack, "lib"))
    os.symlink(gradsync, os.path.join(pack, "bin", "gradsync"))
    os.symlink(unit_tests, os.path.join(pack, "bin", "gradsync_unit_tests"))
    out = os.path.join(work, "out")
    script = os.path.join(repo, "scripts", "gpu-check.sh")
    done = subprocess.run([script, "--from", pack, "--out", out], capture_output=True, text=True,
                          timeout=120)
    check(done.returncode == 0, f"gpu-check.sh without a GPU exits 0 ({done.returncode}): "
                                f"{done.stdout[-500:]} {done.stderr[-500:]}")
    summary = open(os.path.join(out, "summary.txt")).read().splitlines()
    steps = {line.split()[0]: line.split()[1:] for line in summary if line.strip()}
    for step in ["unit", "nccl", "train", "resnet", "resnetsync", "scaling", "mlp"]:
        check(steps.get(step, [""])[0] == "SKIP" and "no GPU" in " ".join(steps[step]),
              f"step {step} is skipped naming the missing GPU: {steps.get(step)}")
    check(steps.get("env", [""])[0] == "SKIP", f"env says no GPU: {steps.get('env')}")
    check(steps.get("refusal", [""])[0] == "PASS" and "CUDA" in " ".join(steps["refusal"]),
          f"the binary refuses --device gpu naming CUDA's reason: {steps.get('refusal')}")
    check("skipped" in done.stdout.splitlines()[-1],
          f"the last line says what was skipped: {done.stdout.splitlines()[-1:]}")

    bad = subprocess.run([script, "--bogus"], capture_output=True, text=True, timeout=30)
    check(bad.returncode == 2 and "--bogus" in bad.stderr,
          f"an unknown argument exits 2 naming it ({bad.returncode}, {bad.stderr.strip()})")
    bad_skip = subprocess.run([script, "--skip", "mlp,bogus"], capture_output=True, text=True,
                              timeout=30)
    check(bad_skip.returncode == 2 and "'bogus'" in bad_skip.stderr
          and "resnetsync" in bad_skip.stderr,
          f"--skip with a step that is not one exits 2 naming it and the steps "
          f"({bad_skip.returncode}, {bad_skip.stderr.strip()})")

    # The comparer on CPU runs: two that follow `single`, one that does not (another lr).
    preset = os.path.join(work, "follow.yaml")
    open(preset, "w").write(
        "strategy: single\n"
        "data: {kind: synthetic, train_samples: 2048, test_samples: 256, dim: 32, classes: 10}\n"
        "model: {hidden: [64]}\n"
        "train: {steps: 20, batch: 32, lr: 0.1, momentum: 0.9}\n"
        "checkpoint: {every: 10}\n"
        "output: {progress: off}\n"
        "runs:\n"
        "  - {name: single}\n"
        "  - {name: ring-2, strategy: allreduce, workers: 2, train: {batch: 16}}\n"
        "  - {name: other-lr, train: {lr: 0.2}}\n")
    results = os.path.join(work, "results")
    run = subprocess.run([gradsync, "run", preset, "--output", results], capture_output=True,
                         text=True, timeout=120)
    check(run.returncode == 0, f"the CPU runs finish: {run.stderr[-300:]}")
    compare = [sys.executable, os.path.join(repo, "scripts", "gpu_check_compare.py"),
               os.path.join(results, "latest"), "--widths", "32,64,10", "--steps", "10,20"]
    ok = subprocess.run(compare + ["--limit", "1e-4"], capture_output=True, text=True)
    rows = {line.split("|")[1].strip(): line for line in ok.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| run")}
    check("| yes |" in rows.get("ring-2", ""), f"ring-2 follows single: {rows.get('ring-2')}")
    check("NO" in rows.get("other-lr", ""), f"another lr does not: {rows.get('other-lr')}")
    check(ok.returncode == 1, f"a run that does not follow fails the comparison ({ok.returncode})")
    chosen = subprocess.run(compare + ["--runs", "ring-2"], capture_output=True, text=True)
    check(chosen.returncode == 0 and "other-lr" not in chosen.stdout and "ring-2" in chosen.stdout,
          f"--runs compares only the runs named: {chosen.stdout}")
    absent = subprocess.run(compare + ["--runs", "ring-3"], capture_output=True, text=True)
    check(absent.returncode == 1 and "ring-3" in absent.stdout,
          f"--runs naming a run that is not there fails, naming it: {absent.stdout}")
    shutil.rmtree(os.path.join(results, "latest", "other-lr"))
    clean = subprocess.run(compare, capture_output=True, text=True)
    check(clean.returncode == 0, f"only following runs: passes ({clean.stdout})")
    shutil.rmtree(os.path.join(results, "latest", "ring-2", "checkpoints", "step-00000020"))
    missing = subprocess.run(compare, capture_output=True, text=True)
    check(missing.returncode == 1 and "missing" in missing.stdout,
          f"a missing checkpoint fails, named: {missing.stdout}")
finally:
    shutil.rmtree(work, ignore_errors=True)
check.finish()
