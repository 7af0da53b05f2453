"""The fault matrix: each strategy (allreduce over tcp, gloo (on async pairs, and halving-doubling
on sync pairs, whose reads block in the kernel) and mpi; ps sync and async) run by
`gradsync run` under each fault a user meets, with
comm.timeout_s 3. Every cell must end within three times its timeout after the fault, with the
last line naming the process at fault (or the disk), say before it which of the run's files are
complete, and leave no process behind. Prints the
table: fault, strategy, expected name, named, seconds to end, orphans left.

Faults: a worker killed with SIGKILL; a worker stopped with SIGSTOP (alive, silent), rank 0
too, which hosts the rendezvous store; the parameter server's shard killed; the results disk
full (a 256 KiB tmpfs: root only, else skipped and said); MASTER_PORT taken by another program
before ranks started by hand (another launcher's way) begin.
"""
import glob
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from checks import Checks, children_of, free_port, process_name, still_alive

gradsync, preset = sys.argv[1], sys.argv[2]
check = Checks()
TIMEOUT_S = 3
BOUND_S = 3 * TIMEOUT_S
STRATEGIES = ["allreduce-tcp", "allreduce-gloo", "allreduce-gloo-sync", "allreduce-mpi", "ps-sync",
              "ps-async"]
# The faults that reach a blocked collective; the disk and the port come before any pairs.
COLLECTIVE_ONLY = {"allreduce-gloo-sync"}


def start(run, out):
    return subprocess.Popen([gradsync, "run", preset, "--only", run, "--output", out],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(launcher, limit):
    """(seconds until the launcher ended, its last stderr line); kills it past `limit`."""
    began = time.time()
    try:
        _, err = launcher.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        launcher.kill()
        _, err = launcher.communicate()
    lines = err.strip().splitlines()
    return time.time() - began, lines[-1] if lines else "", err


def run_processes(launcher):
    """(pid, name) of the run's processes: the launcher's children ("rank R", "server K"), or
    under mpirun its ranks, named by Open MPI's OMPI_COMM_WORLD_RANK."""
    found = []
    for pid, args in children_of(launcher.pid):
        if "mpirun" in os.path.basename(args.split()[1]):  # Debian's is mpirun.openmpi
            for rank_pid, _ in children_of(pid):
                try:
                    env = open(f"/proc/{rank_pid}/environ", "rb").read().split(b"\0")
                except OSError:
                    continue
                ranks = [v.split(b"=")[1] for v in env if v.startswith(b"OMPI_COMM_WORLD_RANK=")]
                if ranks:
                    found.append((rank_pid, "rank " + ranks[0].decode()))
        else:
            found.append((pid, process_name(pid, args)))
    return found


def signal_cell(run, victim, sig):
    """Starts `run`, sends `sig` to the process named `victim` 2 s into training; returns the
    row's seconds, last line and leftovers."""
    with tempfile.TemporaryDirectory() as out:
        launcher = start(run, out)
        expected = 3 if run.startswith("ps") else 2
        procs, deadline = [], time.time() + 30
        while len(procs) < expected and time.time() < deadline:
            time.sleep(0.1)
            procs = run_processes(launcher)
        time.sleep(2)
        pids = [p for p, name in procs if name == victim]
        if len(pids) != 1:
            launcher.kill()
            launcher.communicate()
            return None, f"{victim} not found among {procs}", [], ""
        os.kill(pids[0], sig)
        took, last, err = finish(launcher, BOUND_S + 30)
        time.sleep(0.3)
        return took, last, still_alive(p for p, _ in procs), err


def check_whole_rows(run, out):
    """metrics.csv on the full disk: a header, then rows that are each complete (every column,
    ending in a newline), however the disk cut the writes off."""
    found = glob.glob(os.path.join(out, "tiny_faults-*", run, "metrics.csv"))
    check(len(found) == 1, f"disk full / {run}: one metrics.csv under {out}: {found}")
    if not found:
        return
    text = open(found[0], "rb").read().decode()
    lines = text.split("\n")
    columns = lines[0].count(",")
    check(text.endswith("\n") and all(line.count(",") == columns for line in lines[1:-1]),
          f"disk full / {run}: every row of metrics.csv whole ({len(lines) - 2} rows)")
    check(len(lines) > 2, f"disk full / {run}: rows were written before the disk filled")


def disk_full_cell(run):
    """The run's results on a 256 KiB tmpfs, which metrics.csv fills within seconds."""
    with tempfile.TemporaryDirectory() as out:
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", out],
                          capture_output=True).returncode != 0:
            return None, "cannot mount a tmpfs (not root)", [], ""
        try:
            launcher = start(run, out)
            procs = []
            began = time.time()
            while launcher.poll() is None and time.time() - began < 60:
                procs = children_of(launcher.pid) or procs
                time.sleep(0.1)
            took, last, err = finish(launcher, 60)
            time.sleep(0.3)
            check_whole_rows(run, out)
            return time.time() - began, last, still_alive(p for p, _ in procs), err
        finally:
            subprocess.run(["umount", "-l", out], capture_output=True)


def port_taken_cell(run):
    """MASTER_PORT held by another program before the run starts. The ranks are started by hand
    with torchrun's variables, as another launcher starts them: under `gradsync run` the
    launcher binds or holds every port itself, so none can be taken. Rank 0 must fail at once,
    naming the setting that gave it the port; every other process within the timeout, naming
    rank 0. The row's "last line" is each process's, joined; timed from the start."""
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", free_port()))
    squatter.listen()  # accepts connections, answers nothing
    world = 3 if run.startswith("ps") else 2  # ps roles: the last rank serves the shard
    procs, lasts = [], []
    with tempfile.TemporaryDirectory() as out:
        began = time.time()
        for rank in range(world):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(squatter.getsockname()[1]))
            procs.append(subprocess.Popen(
                [gradsync, "worker", preset, "--only", run, "--run-dir", out], env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        for p in procs:
            try:
                _, err = p.communicate(timeout=BOUND_S + 30)
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
            lines = err.strip().splitlines()
            lasts.append(lines[-1] if lines else "")
        took = time.time() - began
    squatter.close()
    named = ("MASTER_PORT" in lasts[0] and "Address already in use" in lasts[0] and
             all("rank 0" in last for last in lasts[1:]) and
             all(p.returncode not in (0, None) for p in procs))
    last = " | ".join(f"rank {r}: {line}" for r, line in enumerate(lasts))
    return took, last, still_alive(p.pid for p in procs), "", named


cells = []
for run in STRATEGIES:
    mpi = run.endswith("mpi")
    worker = "worker 1" if run.startswith("ps") else "rank 1"
    # Under mpirun the last line is mpirun's exit with the first rank's error, or its own
    # report of a rank that died by a signal ("... process rank 1 with PID ...").
    killed = "process rank 1 " if mpi else "rank 1 (pid"
    # The first rank's error line names the culprit first: "error: rank 1 (HOST) during ...".
    stopped = "error: rank {} (" if mpi else "rank {}"
    cells.append(("SIGKILL rank 1", run, killed, lambda r=run: signal_cell(r, "rank 1",
                                                                           signal.SIGKILL)))
    cells.append(("SIGSTOP rank 1", run, worker if not mpi else stopped.format(1),
                  lambda r=run: signal_cell(r, "rank 1", signal.SIGSTOP)))
    if run.startswith("allreduce"):
        # Rank 0 hosts the rendezvous store: the others must still name it, not each other.
        cells.append(("SIGSTOP rank 0 (store host)", run, stopped.format(0),
                      lambda r=run: signal_cell(r, "rank 0", signal.SIGSTOP)))
    if run.startswith("ps"):
        cells.append(("SIGKILL server 0", run, "server 0 (pid",
                      lambda r=run: signal_cell(r, "server 0", signal.SIGKILL)))
    if run in COLLECTIVE_ONLY:
        continue
    cells.append(("disk full", run, "No space left on device", lambda r=run: disk_full_cell(r)))
    # ps-sync stands for both modes: the store comes before any mode matters. mpi's ranks need
    # mpirun; `gradsync run` holds the store's port for them (tcp::hold_port).
    if run not in ("ps-async", "allreduce-mpi"):
        cells.append(("MASTER_PORT taken before start", run, "MASTER_PORT (rank 0), rank 0",
                      lambda r=run: port_taken_cell(r)))

rows = []
for fault, run, expected, cell in cells:
    took, last, left, err, *named_by_cell = cell()
    if took is None:
        rows.append((fault, run, expected, "skipped: " + last, "-", "-"))
        print(f"SKIP {fault} / {run}: {last}")
        # Only a tmpfs the test may not mount excuses a cell; a victim not found fails it.
        check(fault == "disk full", f"{fault} / {run}: {last}")
        continue
    named = named_by_cell[0] if named_by_cell else expected in last
    # A disk-full run is timed from its start: the moment the disk fills is the run's own.
    bound = BOUND_S if fault != "disk full" else BOUND_S + 20
    by_hand = fault.startswith("MASTER_PORT")  # no gradsync run above the processes
    rows.append((fault, run, expected, "yes" if named else "NO", f"{took:.1f}", str(len(left))))
    check(named, f"{fault} / {run}: the last line names {expected!r}: {last!r}")
    check(took < bound, f"{fault} / {run}: ended {took:.1f} s after the fault (bound {bound} s)")
    check(not left, f"{fault} / {run}: no process left behind: {left}")
    check(by_hand or f"gradsync: run {run} failed; kept in " in err,
          f"{fault} / {run}: the run says which of its files are complete")
    if not named:
        print(err[-3000:] or last)

print()
print("| fault | strategy | expected name | named | seconds to end | orphans left |")
print("|---|---|---|---|---:|---:|")
for row in rows:
    print("| " + " | ".join(row) + " |")
print()
check.finish()
