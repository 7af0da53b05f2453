"""Strangers on a run's ports while it trains: a parameter-server shard's endpoint and rank 0's
rendezvous store each get a connection that sends garbage, one that sends a ZeroMQ greeting of
another version, and one that connects and says nothing; the shard also gets a real worker of
another run (`gradsync worker` from a copy of the run's configuration, so the same world and
model, but without this run's id), which must be refused with one line saying so. The run must
finish as if they were not there (exit 0, every step, summary.json), with no rank blamed."""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

from checks import Checks, children_of, free_port, process_name

gradsync, preset = sys.argv[1], sys.argv[2]
check = Checks()
STEPS = 20000


def strays(host, port, held):
    """Three strangers at host:port; the silent one stays open (kept in `held`). Returns how
    many connected."""
    connected = 0
    for payload in (b"GET / HTTP/1.0\r\n\r\n" + bytes(range(256)) * 4,
                    b"\xff" + b"\x00" * 8 + b"\x7f\x09\x09NULL" + b"\x00" * 48):
        try:
            with socket.create_connection((host, port), timeout=2) as s:
                connected += 1
                s.sendall(payload)
                time.sleep(0.2)
        except OSError:
            pass  # reset after the garbage: fine, as long as the run goes on
    try:
        held.append(socket.create_connection((host, port), timeout=2))
        connected += 1
    except OSError:
        pass
    return connected


def worker_of_another_run(out, run, endpoint):
    """A `gradsync worker` of another run at the shard `endpoint`; returns (exit code, its last
    line). Same configuration text, another folder: only the run's id tells it apart."""
    config = os.path.join(os.path.realpath(os.path.join(out, "latest")), run, "config.yaml")
    with tempfile.TemporaryDirectory() as other:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GRADSYNC_")}
        env.update(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(free_port()))
        try:
            done = subprocess.run([gradsync, "worker", "--config", config, "--run-dir", other,
                                   "--ps-endpoints", endpoint], env=env, capture_output=True,
                                  text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return None, "still running after 60 s"
        lines = done.stderr.strip().splitlines()
        return done.returncode, lines[-1] if lines else ""


def run_with_strays(run, target):
    """Runs `run`; once it trains, strays hit `target` ("shard" or "store"); returns
    (exit code, stderr, summary)."""
    with tempfile.TemporaryDirectory() as out:
        launcher = subprocess.Popen(
            [gradsync, "run", preset, "--only", run, "--output", out, "--set",
             f"train.steps={STEPS}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines, held = [], []

        def read():
            for line in launcher.stderr:
                lines.append(line)
        reader = threading.Thread(target=read)
        reader.start()
        deadline = time.time() + 30
        where = None
        while where is None and time.time() < deadline and launcher.poll() is None:
            time.sleep(0.1)
            if target == "shard":
                found = [re.search(r"endpoint tcp://([\d.]+):(\d+)", l) for l in lines]
                found = [m for m in found if m]
                if found:
                    where = (found[0].group(1), int(found[0].group(2)))
            else:
                for pid, args in children_of(launcher.pid):
                    if process_name(pid, args) == "rank 0":
                        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                        ports = [v[12:] for v in env if v.startswith(b"MASTER_PORT=")]
                        if ports:
                            where = ("127.0.0.1", int(ports[0]))
        check(where is not None, f"{run}: found the {target}'s address")
        if where:
            connected = strays(*where, held)
            # While it trains: a run already over would refuse them, and prove nothing.
            check(connected == 3 and launcher.poll() is None,
                  f"{run}: the strays reached the {target} while it trained ({connected} of 3)")
            if target == "shard":
                code, last = worker_of_another_run(out, run, "tcp://%s:%d" % where)
                check(code not in (0, None) and "of another run" in last and "shard 0" in last,
                      f"{run}: a worker of another run is refused, naming why: {code} {last!r}")
                check(launcher.poll() is None, f"{run}: still training after that worker")
        try:
            launcher.wait(timeout=120)
        except subprocess.TimeoutExpired:
            launcher.kill()
        reader.join()
        for s in held:
            s.close()
        path = os.path.join(os.path.realpath(os.path.join(out, "latest")), run, "summary.json")
        summary = json.load(open(path)) if os.path.exists(path) else {}
        return launcher.returncode, "".join(lines), summary


for run, target in (("ps-sync", "shard"), ("allreduce-tcp", "store")):
    code, err, summary = run_with_strays(run, target)
    check(code == 0, f"{run} with strays on its {target}: exit {code}: {err[-2000:]}")
    check(summary.get("steps") == STEPS, f"{run}: every step trained: {summary.get('steps')}")
    check("gradsync: error" not in err, f"{run}: no rank blamed")
    if target == "shard":
        check("refused HELLO" in err and "of another run" in err,
              f"{run}: the shard logged the other run's worker it refused")

check.finish()
