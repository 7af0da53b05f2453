"""A bad preset fails with one line naming the file, the line and the key, and a non-zero exit;
so do a value out of its key's range and a model this machine cannot hold. None of them leaves a
folder behind. A std::bad_alloc the memory check could not foresee ends in one line naming the
run."""
import os
import resource
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
    ("strategy: ddp\ndata: {kind: synthetic}\n", [], [":1:", "strategy", "ddp", "single, dp, allreduce, zero, ps"]),
    (BASE, ["train.batch=1.5"], ["--set", "train.batch"]),
    # Out of range: the key and its whole range, from the file and from --set.
    (BASE + "comm:\n  bucket_mb: 0.0000001\n", [],
     [":4:", "comm.bucket_mb", "must be in [0.001, 1048576]", "0.0000001"]),
    (BASE, ["train.steps=1000000000000"], ["--set", "train.steps", "must be in [0, 100000000]"]),
    # A model no machine holds (a 4 TB layer): refused by the memory estimate, naming the run,
    # the key and both figures, before any folder exists.
    (BASE + "model: {hidden: [1000000, 1000000]}\n", [],
     ["single-1: model.hidden: [1000000, 1000000] needs about", "TiB", "available"]),
]


def one_line_failure(proc, needles):
    lines = proc.stderr.strip().splitlines()
    return proc.returncode != 0 and len(lines) == 1 and all(n in lines[0] for n in needles)


def sanitized(binary):
    """ASan and TSan reserve terabytes of address space: no address-space limit for them."""
    with open(binary, "rb") as f:
        image = f.read()
    return b"__asan_init" in image or b"__tsan_init" in image


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


failures = 0
total = 0


def report(ok, what):
    global failures, total
    total += 1
    failures += not ok
    print(("ok   " if ok else "FAIL ") + what)


with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "results")
    for i, (text, overrides, expected) in enumerate(CASES):
        path = os.path.join(tmp, f"bad{i}.yaml")
        with open(path, "w") as f:
            f.write(text)
        args = [gradsync, "run", path, "--output", out]
        for o in overrides:
            args += ["--set", o]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
        needles = expected + ([] if overrides or "needs about" in expected[0] else [path])
        report(one_line_failure(proc, needles), f"case {i}: exit {proc.returncode}: {proc.stderr.strip()}")
    # A preset file that does not exist.
    proc = subprocess.run([gradsync, "run", os.path.join(tmp, "missing.yaml")],
                          capture_output=True, text=True, timeout=60)
    report(one_line_failure(proc, ["missing"]), f"missing preset: {proc.stderr.strip()}")
    # Nothing was written for runs that never started.
    report(not os.path.exists(out), f"no results folder for a rejected preset: {os.listdir(tmp)}")

    # A model of 1.6 GiB (12000 x 12000 floats, three times), which the estimate lets through
    # where that much is available, under a 1 GiB address-space limit: the allocation fails
    # inside the run, which must still end in one line naming it.
    limit = 1 << 30
    if sanitized(gradsync):
        print("skip bad_alloc: a sanitizer build cannot run under an address-space limit")
    elif mem_available() < 3 * limit:
        print(f"skip bad_alloc: {mem_available() >> 20} MiB available, the estimate would refuse it")
    else:
        path = os.path.join(tmp, "oom.yaml")
        with open(path, "w") as f:
            f.write("strategy: single\n"
                    "data: {kind: synthetic, train_samples: 256, test_samples: 64, dim: 8}\n"
                    "model: {hidden: [12000, 12000]}\ntrain: {steps: 1, batch: 8}\n"
                    "output: {progress: off}\n")
        proc = subprocess.run(
            [gradsync, "run", path, "--output", os.path.join(tmp, "oom")],
            capture_output=True, text=True, timeout=120,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
        last = proc.stderr.strip().splitlines()[-1:] or [""]
        ok = (proc.returncode == 1
              and last[0].startswith("gradsync: error: run single-1: out of memory (std::bad_alloc)")
              and "model.hidden" in last[0]
              and "gradsync: error: std::bad_alloc" not in proc.stderr)
        report(ok, f"bad_alloc names the run: exit {proc.returncode}: {last[0]}")

print(f"{total - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
