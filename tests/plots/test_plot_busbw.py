#!/usr/bin/python3
"""Checks plots/plot_busbw.py on the JSON of a real `gradsync bench allreduce --json` run.

Usage: test_plot_busbw.py GRADSYNC
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "plots", "plot_busbw.py")
PYTHON = "/usr/bin/python3"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

gradsync = sys.argv[1]
failures = checks = 0


def check(ok, message):
    global failures, checks
    print(("ok   " if ok else "FAIL ") + message)
    failures += not ok
    checks += 1


with tempfile.TemporaryDirectory() as tmp:
    docs = []
    for n in (1, 2):
        path = os.path.join(tmp, f"bench-{n}.json")
        with open(path, "w") as f:
            proc = subprocess.run([gradsync, "bench", "allreduce", "-n", str(n), "-b", "4K",
                                   "-e", "64K", "-f", "4", "--backend", "tcp", "--json"],
                                  stdout=f, stderr=subprocess.PIPE, text=True, timeout=120)
        check(proc.returncode == 0, f"bench -n {n} ran: {proc.stderr[-300:]}")
        docs.append(path)
    out = os.path.join(tmp, "busbw.png")
    proc = subprocess.run([PYTHON, SCRIPT, out] + docs, capture_output=True, text=True,
                          timeout=120)
    check(proc.returncode == 0 and proc.stdout.strip() == out, f"plotted: {proc.stderr[-300:]}")
    check(os.path.exists(out) and open(out, "rb").read(8) == PNG_MAGIC
          and os.path.getsize(out) > 10000, "a PNG with something in it")
    # A file that is not the bench's JSON: one line naming it, exit 2, no PNG.
    wrong = os.path.join(tmp, "summary.json")
    with open(wrong, "w") as f:
        json.dump({"run": "single"}, f)
    bad_out = os.path.join(tmp, "bad.png")
    proc = subprocess.run([PYTHON, SCRIPT, bad_out, wrong], capture_output=True, text=True,
                          timeout=60)
    lines = proc.stderr.strip().splitlines()
    check(proc.returncode == 2 and len(lines) == 1 and wrong in lines[0]
          and not os.path.exists(bad_out), f"a wrong file is one line: {proc.stderr.strip()}")

print(f"{checks - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
