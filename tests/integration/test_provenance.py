"""What produced a result is written beside it: summary.json's provenance and the log's first line.

`gradsync run` of a tiny preset; its summary's provenance must hold real values: the commit the
binary was built from equals `git rev-parse HEAD` of the source tree (ctest builds before it
tests), the version equals `gradsync --version`'s, the host and CPU are this machine's, the CPU
kernels are a path this binary names, the command line is the one run, the config hash is the
FNV-1a hash of the run's config.yaml, and every communication library has a version.
Usage: test_provenance.py GRADSYNC PRESET SOURCE_DIR
"""
import glob
import json
import os
import re
import socket
import subprocess
import sys
import tempfile

from checks import Checks

gradsync, preset, source = sys.argv[1], sys.argv[2], sys.argv[3]
check = Checks()


def fnv1a64(data):
    h = 14695981039346656037
    for byte in data:
        h = ((h ^ byte) * 1099511628211) % (1 << 64)
    return h or 1


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


version = subprocess.run([gradsync, "--version"], capture_output=True, text=True, timeout=30)
check(version.returncode == 0 and re.fullmatch(r"gradsync \d+\.\d+\.\d+ \(commit [0-9a-f]{12}"
                                                r"(, uncommitted changes)?\)\n", version.stdout),
      f"--version: {version.stdout!r}")
git = subprocess.run(["git", "-C", source, "rev-parse", "HEAD"], capture_output=True, text=True)
head = git.stdout.strip() if git.returncode == 0 else "unknown"

with tempfile.TemporaryDirectory() as out:
    args = [gradsync, "run", preset, "--output", out]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    check(proc.returncode == 0, f"the run succeeded: {proc.stderr[-400:]}")
    first = proc.stderr.splitlines()[0] if proc.stderr else ""
    check(first.startswith("gradsync: " + version.stdout.strip() + " on "),
          f"the log's first line says what runs: {first!r}")
    summaries = glob.glob(os.path.join(out, "*", "*", "summary.json"))
    check(len(summaries) >= 1, f"a summary was written: {summaries}")
    for path in summaries:
        p = json.load(open(path))["provenance"]
        check(p["commit"] == head, f"commit {p['commit']} is the source's HEAD {head}")
        check(version.stdout.startswith(f"gradsync {p['gradsync']} (commit {p['commit'][:12]}"),
              f"version {p['gradsync']} as --version says")
        check(p["host"] == socket.gethostname(), f"host {p['host']}")
        check(p["cpu"] == cpu_model(), f"cpu {p['cpu']!r}")
        kernels = p["cpu_kernels"]
        check(kernels["path"] in ("avx512", "avx2", "portable") and kernels["isa"] and
              kernels["products"], f"cpu kernels {kernels}")
        check(p["command_line"] == " ".join(args), f"command line {p['command_line']!r}")
        config = open(os.path.join(os.path.dirname(path), "config.yaml"), "rb").read()
        check(p["config_hash"] == f"{fnv1a64(config):016x}", f"config hash {p['config_hash']}")
        libraries = p["libraries"]
        check("zeromq" in libraries and all(re.search(r"\d+\.\d+", v) for v in libraries.values()),
              f"library versions {libraries}")
check.finish()
