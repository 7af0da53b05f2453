"""Progress of a multi-process run on a terminal: drawn in place at least once a second.

`gradsync run` of a 2-rank allreduce under a pseudo-terminal: rank 0's progress reaches the
launcher marked and is redrawn in place ("\\r\\033[K[rank 0] [name] step ..."), with no gap of more
than a second between draws while it trains, and never as a scrolling plain line. The same run
with stderr a pipe prints no terminal control at all.
Usage: test_progress_terminal.py GRADSYNC
"""
import os
import pty
import re
import select
import subprocess
import sys
import tempfile
import time

from checks import Checks

gradsync = sys.argv[1]
check = Checks()
PRESET = """
strategy: allreduce
workers: 2
data: {kind: synthetic, train_samples: 8192, test_samples: 512, dim: 256, classes: 10}
model: {hidden: [512, 512]}
train: {steps: 3000, batch: 64, lr: 0.05, momentum: 0.9, eval_every: 0}
comm: {timeout_s: 30}
output: {progress: auto, trace_steps: 0}
runs:
  - {name: watched}
"""
DRAW = "\r\033[K[rank 0] [watched] step "

with tempfile.TemporaryDirectory() as tmp:
    preset = os.path.join(tmp, "watched.yaml")
    with open(preset, "w") as f:
        f.write(PRESET)
    args = [gradsync, "run", preset, "--output", os.path.join(tmp, "out")]

    master, slave = pty.openpty()
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, cwd=tmp)
    os.close(slave)
    text, draws = "", []  # draws: arrival time of each in-place redraw
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            chunk = os.read(master, 65536).decode(errors="replace")
        except OSError:  # the child side closed
            break
        now = time.monotonic()
        draws += [now] * chunk.count(DRAW)
        text += chunk
    proc.wait(timeout=60)
    os.close(master)
    check(proc.returncode == 0, f"the run succeeded under a terminal: {text[-300:]!r}")
    check(len(draws) >= 2, f"progress was drawn in place ({len(draws)} draws)")
    gaps = [b - a for a, b in zip(draws, draws[1:])]
    check(not gaps or max(gaps) <= 1.2, f"at least once a second (largest gap {max(gaps or [0]):.2f} s)")
    check(re.search(r"\n\[rank 0\] \[watched\] step", text) is None,
          "no plain progress lines on a terminal")
    check("\x1e" not in text, "the relay mark never reaches the screen")

    piped = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=tmp)
    check(piped.returncode == 0 and "\033[K" not in piped.stderr and "\x1e" not in piped.stderr,
          "through a pipe: no terminal control, no mark")
check.finish()
