"""A tiny check collector for the integration scripts: each check counts, failures print at
once, and the summary line is the `N passed, N failed` that CI reads."""
import glob
import os
import shutil
import signal
import struct
import subprocess
import sys
import time


class Checks:
    def __init__(self):
        self.passed = 0
        self.failures = []

    def __call__(self, condition, message):
        if condition:
            self.passed += 1
        else:
            self.failures.append(message)
            print("FAIL:", message)

    def finish(self):
        print(f"{self.passed} passed, {len(self.failures)} failed")
        sys.exit(1 if self.failures else 0)


def run_mpi_peer_script(script, gradsync, *args):
    """Runs a bench script that measures gradsync against a library under mpirun, the way its
    figure is made (GRADSYNC set, a plain PATH), returning (exit code, stdout + stderr); exits
    77 (skipped) when mpirun is not installed."""
    if shutil.which("mpirun") is None:
        print("mpirun not installed: skipped")
        sys.exit(77)
    done = subprocess.run(["bash", script, *args], capture_output=True, text=True, timeout=280,
                          env={"GRADSYNC": gradsync, "PATH": "/usr/bin:/bin"})
    return done.returncode, done.stdout + done.stderr


def children_of(pid):
    """(pid, command line) of each direct child of `pid`."""
    out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(pid)], capture_output=True,
                         text=True)
    return [(int(line.split()[0]), line) for line in out.stdout.strip().splitlines()]


def process_name(pid, args):
    """The name `gradsync run`'s launcher gives a child (experiments/run_experiment.cpp):
    "server K" for `gradsync server ... --shard K`, else "rank R" from its RANK variable."""
    words = args.split()
    if "server" in words and "--shard" in words:
        return "server " + words[words.index("--shard") + 1]
    try:
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        return None
    ranks = [v[len(b"RANK="):].decode() for v in env if v.startswith(b"RANK=")]
    return "rank " + ranks[0] if ranks else None


def kill_one_and_check_teardown(check, launcher, expected, pick, settle_s, bound_s):
    """Waits for `expected` children of the running `gradsync run` launcher, SIGKILLs the one
    `pick(children)` returns after `settle_s`, then checks the whole run ends within
    `bound_s`, names the victim (its process name and pid) and its signal on its last line,
    and leaves nothing behind."""
    procs = []
    deadline = time.time() + 30
    while len(procs) < expected and time.time() < deadline:
        time.sleep(0.2)
        procs = children_of(launcher.pid)
    check(len(procs) == expected, f"{expected} processes started ({procs})")
    time.sleep(settle_s)
    victim = pick(procs)
    # Read before the kill: a dead process's environment is gone.
    name = process_name(victim, dict(procs).get(victim, ""))
    check(name is not None, f"the victim {victim} is a server or a rank: {procs}")
    try:
        os.kill(victim, signal.SIGKILL)
    except (ProcessLookupError, OverflowError, TypeError):
        check(False, f"a process was running to be killed ({procs})")
    elapsed, last = wait_after_kill(launcher, bound_s)
    check(launcher.returncode not in (0, None), f"the run failed (exit {launcher.returncode})")
    check(elapsed < bound_s, f"the run ended {elapsed:.1f} s after the kill (bound {bound_s} s)")
    # launch/launcher.cpp: "<name> (pid N) was killed by signal 9 (Killed); stopped ..."
    said = f"{name} (pid {victim}) was killed by signal 9"
    check(said in last, f"the error names the killed process and its signal: {said!r} in {last!r}")
    time.sleep(0.5)
    alive = still_alive(p for p, _ in procs)
    check(alive == [], f"no process left behind: {alive}")


def wait_after_kill(launcher, bound_s):
    """(seconds the launcher took to end after a kill, the last line of its stderr): waits
    `bound_s` + 30 s at most, then kills it, so a run that hangs fails its check, not the test."""
    started = time.time()
    try:
        _, err = launcher.communicate(timeout=bound_s + 30)
    except subprocess.TimeoutExpired:
        launcher.kill()
        _, err = launcher.communicate()
    return time.time() - started, err.strip().splitlines()[-1] if err.strip() else ""


def still_alive(pids):
    """The pids of `pids` that still run (zombies count as ended)."""
    return [p for p in pids if os.path.exists(f"/proc/{p}") and
            open(f"/proc/{p}/stat").read().split()[2] != "Z"]


def run_preset(check, gradsync, preset, out, timeout):
    """Runs `gradsync run PRESET --output OUT`, checks it succeeded, and returns the process
    and the preset's results folder (what OUT/latest points at)."""
    proc = subprocess.run([gradsync, "run", preset, "--output", out], capture_output=True,
                          text=True, timeout=timeout)
    check(proc.returncode == 0, f"gradsync run exited {proc.returncode}: {proc.stderr[-3000:]}")
    return proc, os.path.realpath(os.path.join(out, "latest"))


def load_checkpoint(folder):
    """(step, params) of a step folder, its parts joined in order (common/checkpoint_file.h)."""
    parts = sorted(glob.glob(os.path.join(folder, "part-*.ckpt")),
                   key=lambda p: int(os.path.basename(p).split("-")[1]))
    step, params = None, []
    for path in parts:
        data = open(path, "rb").read()
        (length,) = struct.unpack_from("<I", data, 20)
        step, _total, begin, end, _opt = struct.unpack_from("<5Q", data, 24)
        params += struct.unpack_from(f"<{end - begin}f", data, 64 + length)
    return step, params


def max_rel_diff(a, b):
    """inf unless both hold the same number of values: zip alone would compare only a prefix."""
    if len(a) != len(b) or not a:
        return float("inf")
    return max(abs(x - y) / max(abs(x), abs(y), 1e-12) for x, y in zip(a, b))


def last_step_params(check, run_dir, steps):
    """The parameters in `run_dir`'s checkpoint of step `steps` (its last), checked to be of
    that step: the final parameters that runs under different launchers are compared by."""
    step, params = load_checkpoint(os.path.join(run_dir, "checkpoints", f"step-{steps:08d}"))
    check(step == steps, f"{run_dir}: the last checkpoint is of step {steps}, found {step}")
    return params


def free_port():
    """A TCP port on 127.0.0.1 for a child to listen on, as gradsync picks one
    (launch/local_port.h): drawn outside the kernel's ephemeral range, which every outgoing
    connection takes its source port from, and checked free by binding it."""
    import random
    import socket
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            first, last = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        first, last = 32768, 60999
    if first - 10000 >= 1000:
        low, high = 10000, first - 1
    elif 65535 - last >= 1000:
        low, high = last + 1, 65535
    else:
        low, high = 1024, 65535
    for _ in range(200):
        port = random.randint(low, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port on 127.0.0.1 in {low}..{high} after 200 tries")
