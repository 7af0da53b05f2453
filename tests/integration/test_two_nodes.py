"""Two "nodes" on one machine: two network namespaces joined by a veth pair, one torchrun per
namespace (`--nnodes 2 --node_rank 0|1`, static rendezvous at node 0's address), two ranks on
each. Rank 0's store listens on node 0's address, node 1's ranks reach it and form the ring
across the veth; the run ends with the parameters `gradsync run` ends with at 4 workers (within
1e-5), one metrics row per rank per step.

Skips (exit 77, reported as skipped) when not root, or where `ip netns add` is not permitted.
"""
import csv
import os
import subprocess
import sys
import tempfile

from checks import Checks, last_step_params, max_rel_diff

gradsync, preset = sys.argv[1], sys.argv[2]
DEBIAN_PYTHON = "/usr/bin/python3"
STEPS, PER_NODE = 60, 2
if os.geteuid() != 0:
    print("skipped: network namespaces need root")
    sys.exit(77)
probe = f"gradsync-probe-{os.getpid()}"
if subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode != 0:
    print("skipped: `ip netns add` is not permitted here")  # as test_network_namespaces.py
    sys.exit(77)
subprocess.run(["ip", "netns", "del", probe], capture_output=True)
check = Checks()
tag = f"gs{os.getpid() % 100000}"  # names unique to this test run
NODES = [(f"{tag}a", f"{tag}va", "10.213.7.1"), (f"{tag}b", f"{tag}vb", "10.213.7.2")]


def sh(*argv):
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30)


def make_nodes():
    for ns, _, _ in NODES:
        sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", NODES[0][1], "type", "veth", "peer", "name", NODES[1][1])
    for ns, veth, address in NODES:
        sh("ip", "link", "set", veth, "netns", ns)
        sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", veth)
        sh("ip", "-n", ns, "link", "set", veth, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")


def remove_nodes():
    for ns, _, _ in NODES:
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=30)


with tempfile.TemporaryDirectory() as top:
    ref = os.path.join(top, "ref")
    done = subprocess.run([gradsync, "run", preset, "--only", "ring", "--output", ref,
                           "--set", f"workers={2 * PER_NODE}"],
                          capture_output=True, text=True, timeout=180)
    check(done.returncode == 0, f"gradsync run: exit {done.returncode}: {done.stderr[-2000:]}")
    reference = last_step_params(
        check, os.path.join(os.path.realpath(os.path.join(ref, "latest")), "ring"), STEPS)

    out = os.path.join(top, "out")
    try:
        make_nodes()
        procs = []
        for node, (ns, _, _) in enumerate(NODES):
            procs.append(subprocess.Popen(
                ["ip", "netns", "exec", ns, DEBIAN_PYTHON, "-m", "torch.distributed.run",
                 "--nnodes", "2", "--node_rank", str(node), f"--nproc_per_node={PER_NODE}",
                 "--master_addr", NODES[0][2], "--master_port", "29400", "-r", "1", "-t", "2",
                 "--log_dir", os.path.join(top, f"logs{node}"), "--no_python", gradsync,
                 "worker", preset, "--only", "ring", "--set", f"output.dir={out}"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        for node, p in enumerate(procs):
            try:
                output, _ = p.communicate(timeout=180)
            except subprocess.TimeoutExpired:
                p.kill()
                output, _ = p.communicate()
            check(p.returncode == 0, f"node {node}: torchrun exited {p.returncode}: "
                                     f"{output[-2500:]}")
    finally:
        remove_nodes()
    run_dir = os.path.realpath(os.path.join(out, "latest", "ring"))
    rows = list(csv.DictReader(open(os.path.join(run_dir, "metrics.csv"))))
    check(len(rows) == STEPS * 2 * PER_NODE,
          f"one metrics row per rank per step: {len(rows)}, expected {STEPS * 2 * PER_NODE}")
    check({r["rank"] for r in rows} == {"0", "1", "2", "3"}, "rows from the ranks of both nodes")
    diff = max_rel_diff(last_step_params(check, run_dir, STEPS), reference)
    check(diff <= 1e-5, f"final parameters as under gradsync run (max rel diff {diff:g})")
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    check(tag not in left, f"no namespace left behind: {left!r}")

check.finish()
