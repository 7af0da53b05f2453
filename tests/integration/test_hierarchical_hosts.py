"""Hierarchical all-reduce across simulated hosts: `gradsync teach hierarchical` on two network
namespaces as two hosts, 2 ranks each (and 4 each), root only.

1. The hierarchical runs use shared memory within a host and tcp between the leaders
   (summary.json backend "shm+tcp"), the flat runs the ring ("tcp"); both give the same
   parameters (final checkpoints within 1e-5).
2. The bytes the kernel counted on the hosts' links follow the cost model: at 2 x 2 the flat
   ring puts 3 S a step between hosts, the hierarchy 2 S (payload; headers and the rendezvous
   on top, so within +10%); at 2 x 4 the ring's 3.5 S, the hierarchy's still 2 S. The lesson's
   table prints the same figures.
3. A rank killed with SIGKILL mid-collective (host 1's second rank) ends the run within the
   timeout, naming it, and leaves no shared-memory segment and no namespace behind.

Skips (77) without root or network namespaces.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

from checks import Checks, kill_one_and_check_teardown, last_step_params, max_rel_diff

gradsync = sys.argv[1]
check = Checks()


def skip(reason):
    print(f"skipped: {reason}")
    sys.exit(77)


def shm_segments():
    return {n for n in os.listdir("/dev/shm") if n.startswith("gradsync-")}


def namespaces():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.startswith("gradsync-")}


if os.geteuid() != 0:
    skip("needs root for network namespaces")
probe = f"gradsync-probe-{os.getpid()}"
if subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode != 0:
    skip("`ip netns add` is not permitted here")
subprocess.run(["ip", "netns", "del", probe], capture_output=True)

STEPS = 8
segments_before, namespaces_before = shm_segments(), namespaces()
with tempfile.TemporaryDirectory() as out:
    lesson = subprocess.run(
        [gradsync, "teach", "hierarchical", "--output", out, "--set", f"train.steps={STEPS}",
         "--set", f"checkpoint.every={STEPS}", "--set", "output.progress=off"],
        capture_output=True, text=True, timeout=240)
    check(lesson.returncode == 0, f"the lesson ran: {lesson.stderr[-3000:]}")
    top = os.path.realpath(os.path.join(out, "latest"))
    summaries = {run: json.load(open(os.path.join(top, run, "summary.json")))
                 for run in ["flat-2x2", "hierarchical-2x2", "flat-2x4", "hierarchical-2x4"]}
    S = 4 * summaries["flat-2x2"]["parameters"]
    # (backend, between-hosts bytes per step in S) by the cost model
    expected = {"flat-2x2": ("tcp", 3.0), "hierarchical-2x2": ("shm+tcp", 2.0),
                "flat-2x4": ("tcp", 3.5), "hierarchical-2x4": ("shm+tcp", 2.0)}
    for run, (backend, model) in expected.items():
        s = summaries[run]
        check(s["backend"] == backend, f"{run}: backend {s['backend']!r}, expected {backend!r}")
        measured = s["link_bytes_per_step"] / S
        check(model <= measured <= model * 1.1,
              f"{run}: {measured:.3f} S a step between hosts, the model says {model} S")
        row = re.search(rf"^\| {run} \| 2 x \d \| \w+ \({re.escape(backend)}\) \| ([\d.]+) \| "
                        rf"([\d.]+) \|", lesson.stdout, re.M)
        check(row is not None and abs(float(row.group(2)) - model * S / 1e6) < 0.1,
              f"{run}: the lesson's row gives the model's {model * S / 1e6:.1f} MB: "
              f"{row.group(0) if row else lesson.stdout[-1500:]}")
    for shape in ["2x2", "2x4"]:
        flat = last_step_params(check, os.path.join(top, f"flat-{shape}"), STEPS)
        hier = last_step_params(check, os.path.join(top, f"hierarchical-{shape}"), STEPS)
        diff = max_rel_diff(flat, hier)
        check(diff <= 1e-5, f"{shape}: hierarchical and flat parameters differ by {diff:.2e}")

    # A non-leader killed mid-run: named, within the timeout, nothing left behind.
    launcher = subprocess.Popen(
        [gradsync, "run", "hierarchical", "--output", out, "--only", "hierarchical-2x2",
         "--set", "train.steps=100000", "--set", "comm.timeout_s=5",
         "--set", "output.progress=off"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kill_one_and_check_teardown(check, launcher, expected=4,
                                pick=lambda procs: sorted(p for p, _ in procs)[3],
                                settle_s=3, bound_s=20)
    check(shm_segments() - segments_before == set(),
          f"no shared-memory segment left: {shm_segments() - segments_before}")
    check(namespaces() - namespaces_before == set(),
          f"no namespace left: {namespaces() - namespaces_before}")

check.finish()
