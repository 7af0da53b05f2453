"""A bad preset fails with one line naming the file, the line and the key, and a non-zero exit."""
import os
import subprocess
import sys
import tempfile

gradsync = sys.argv[1]
BASE = "strategy: single\ndata: {kind: synthetic}\n"
CASES = [
    # (preset text, --set overrides, what the one line must contain)
    (BASE + "train:\n  stpes: 10\n", [], [":4:", "train.stpes", "unknown key"]),
    (BASE + "train:\n  lr: fast\n", [], [":4:", "train.lr", "fast"]),
    (BASE + "workers: many\n", [], [":3:", "workers"]),
    ("strategy: single\ndata:\n  kind: idx\n  dir: /nonexistent/mnist\n", [],
     [":4:", "data.dir", "/nonexistent/mnist"]),
    ("strategy: ddp\ndata: {kind: synthetic}\n", [], [":1:", "strategy", "ddp", "single, dp, allreduce, ps"]),
    (BASE, ["train.batch=1.5"], ["--set", "train.batch"]),
]

failures = 0
with tempfile.TemporaryDirectory() as tmp:
    for i, (text, overrides, expected) in enumerate(CASES):
        path = os.path.join(tmp, f"bad{i}.yaml")
        with open(path, "w") as f:
            f.write(text)
        args = [gradsync, "run", path, "--output", tmp]
        for o in overrides:
            args += ["--set", o]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
        lines = proc.stderr.strip().splitlines()
        needles = expected + ([] if overrides else [path])
        ok = (proc.returncode != 0 and len(lines) == 1 and all(n in lines[0] for n in needles))
        print(("ok   " if ok else "FAIL ") + f"case {i}: exit {proc.returncode}: {proc.stderr.strip()}")
        failures += not ok
    # A preset file that does not exist.
    proc = subprocess.run([gradsync, "run", os.path.join(tmp, "missing.yaml")],
                          capture_output=True, text=True, timeout=60)
    ok = proc.returncode != 0 and "missing" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    print(("ok   " if ok else "FAIL ") + f"missing preset: {proc.stderr.strip()}")
    failures += not ok
    # Nothing was written for runs that never started.
    leftovers = [n for n in os.listdir(tmp) if not n.endswith(".yaml")]
    ok = leftovers == []
    print(("ok   " if ok else "FAIL ") + f"no results folder for a rejected preset: {leftovers}")
    failures += not ok

total = len(CASES) + 2
print(f"{total - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
