"""A command-line mistake fails with one line on stderr naming it, exit code 2, and nothing run.

Exit 2 tells a script "you called it wrong" from 1, "it failed while running"
(docs/errors.md); --help is not a mistake and exits 0.
"""
import os
import subprocess
import sys
import tempfile

gradsync = sys.argv[1]
CASES = [
    # (arguments, what the one line must contain besides "gradsync: error: ")
    ([], ["subcommand", "`gradsync --help`"]),
    (["nope"], ["'nope' is not a command", "run, sweep"]),
    (["--bogus"], ["'--bogus'"]),
    (["run", "--bogus"], ["--bogus", "`gradsync run --help`"]),
    (["run"], ["name a preset"]),
    (["run", "quickstart", "--set"], ["--set"]),
    (["server"], ["--config and --run-dir"]),
    (["bench", "allreduce", "--op", "sum"], ["--op", "sum", "`gradsync bench allreduce --help`"]),
    (["bench", "ps", "--rounds", "many"], ["--rounds", "many"]),
    (["model", "--workers"], ["--workers"]),
    # Sizes are checked while parsing, naming the flag.
    (["model", "--bytes", "lots"], ["--bytes", "'lots' is not a size"]),
    (["bench", "ps", "--floats", "1M,4MB"], ["--floats", "'4MB'", "not bytes"]),
    (["bench", "allreduce", "-b", "4Q"], ["--minbytes", "'4Q'"]),
    (["bench", "ps", "--floats", "0"], ["--floats", "'0'"]),
    (["bench", "ps", "--shards", "0"], ["--shards"]),
    (["server", "--shard", "-1"], ["--shard"]),
    (["model", "--bytes", "0"], ["--bytes", "'0'", "at least 1 byte"]),
    (["bench", "allreduce", "-b", "2"], ["--minbytes", "at least 4 bytes"]),
    # Numbers out of range, before anything runs (not an internal check or a NaN result later).
    (["bench", "allreduce", "-f", "1"], ["--stepfactor"]),
    (["bench", "allreduce", "-n", "0"], ["--ranks"]),
    (["bench", "allreduce", "-n", "300"], ["--ranks"]),
    (["bench", "allreduce", "--iters", "-1"], ["--iters"]),
    (["bench", "allreduce", "--seconds", "0"], ["--seconds"]),
    (["bench", "allreduce", "-b", "64K", "-e", "4K"], ["--maxbytes: 4K is smaller than --minbytes 64K"]),
    (["bench", "mlp", "--batch", "0"], ["--batch", "`gradsync bench mlp --help`"]),
    (["bench", "mlp", "--hidden", "64,0"], ["--hidden"]),
    (["bench", "mlp", "--seconds", "-1"], ["--seconds"]),
]

failures = 0
with tempfile.TemporaryDirectory() as tmp:
    for args, needles in CASES:
        proc = subprocess.run([gradsync] + args, capture_output=True, text=True, timeout=60, cwd=tmp)
        lines = proc.stderr.strip().splitlines()
        # Nothing ran: nothing on stdout, one line on stderr.
        ok = (proc.returncode == 2 and proc.stdout == "" and len(lines) == 1
              and lines[0].startswith("gradsync: error: ") and all(n in lines[0] for n in needles))
        print(("ok   " if ok else "FAIL ") + f"{args}: exit {proc.returncode}: {proc.stderr.strip()}")
        failures += not ok
    for args, needle in [(["--help"], "bench"), (["bench", "ps", "--help"], "--floats")]:
        proc = subprocess.run([gradsync] + args, capture_output=True, text=True, timeout=60,
                              cwd=tmp)
        ok = proc.returncode == 0 and needle in proc.stdout and proc.stderr == ""
        print(("ok   " if ok else "FAIL ") + f"{args}: exit {proc.returncode}")
        failures += not ok

# A bad kernel variable (model/kernels/cpu_kernels.h) is a configuration error, not a usage
# one: exit 1, one line naming the variable, and checked before anything runs or is written.
ENV_CASES = [({"GRADSYNC_KERNELS": "sse"}, ["GRADSYNC_KERNELS", "'sse'", "avx512, avx2"]),
             ({"GRADSYNC_GEMM": "mkl"}, ["GRADSYNC_GEMM", "'mkl'", "library or own"])]
for env, needles in ENV_CASES:
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([gradsync, "run", "quickstart", "--output", tmp + "/out"],
                              capture_output=True, text=True, timeout=60, cwd=tmp,
                              env={**os.environ, **env})
        lines = proc.stderr.strip().splitlines()
        ok = (proc.returncode == 1 and len(lines) == 1 and not os.path.exists(tmp + "/out")
              and all(n in lines[0] for n in needles))
        print(("ok   " if ok else "FAIL ") + f"{env}: exit {proc.returncode}: {proc.stderr.strip()}")
        failures += not ok

total = len(CASES) + 2 + len(ENV_CASES)
print(f"{total - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
