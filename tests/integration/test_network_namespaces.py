"""`network: {namespaces: true, link_gbps: X}`: every process of a multi-process run in its own
network namespace on a veth shaped by tbf (launch/namespace_network.h).

1. The ring and a parameter server run across the namespaces (the shard listens on its
   namespace's address, not 127.0.0.1) and their communication time per step is that of the
   kernel-shaped 0.5 Gbit/s links: within 30% of the alpha-beta model with no latency.
2. network.hosts: 4 ranks on 2 simulated hosts, ranks 0-1 and 2-3 each sharing a namespace
   (and a host id), the ring flat over tcp. summary.json has each host link's kernel-counted
   bytes: the ring's two crossings carry 2(N-1)/N * S each a step, and the traffic between
   ranks of one host stays off the links.
3. Nothing is left behind: no namespace, no veth, no bridge of the run, also when the run is
   interrupted with SIGINT (which it reports, after stopping its processes).

Skips (exit 77, which ctest reports as skipped, with the reason) where it cannot run: not root,
or no network namespaces here.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from checks import Checks

gradsync = sys.argv[1]
check = Checks()

PRESET = """strategy: allreduce
workers: 2
data: {kind: synthetic, train_samples: 4096, test_samples: 256, dim: 16}
model: {kind: synthetic, parameters: 1000000, compute_ms: 5, layers: 4}
train: {steps: 6, batch: 16, lr: 0.1, momentum: 0.0}
comm: {overlap: false, timeout_s: 30}
network: {link_gbps: 0.5, namespaces: true}
output: {progress: off}
runs:
  - {name: ring-2}
  - {name: ps-2, strategy: ps, ps: {servers: 1, mode: sync}}
"""
S = 4e6            # bytes of gradients
RATE = 0.5e9 / 8   # bytes per second
CHUNK = 512 * 1024
MODEL_S = {"ring-2": S / RATE,                          # 2(N-1)/N * S at N = 2
           "ps-2": (max(S, 2 * S) + 2 * CHUNK) / RATE}  # a shard's link, then the drain


def skip(reason):
    # 77: the test's SKIP_RETURN_CODE (tests/integration/CMakeLists.txt), so a machine that
    # cannot run it shows a skip, not a pass.
    print(f"skipped: {reason}")
    sys.exit(77)


def ours():
    """The network objects a gradsync run makes: namespaces gradsync-*, links gs<pid>*."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return ({line.split()[0] for line in ns.splitlines() if line.startswith("gradsync-")} |
            {line.split(": ")[1].split("@")[0] for line in links.splitlines()
             if line.split(": ")[1].startswith("gs")})


if os.geteuid() != 0:
    skip("needs root for network namespaces")
probe = f"gradsync-probe-{os.getpid()}"
if subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode != 0:
    skip("`ip netns add` is not permitted here")
subprocess.run(["ip", "netns", "del", probe], capture_output=True)

before = ours()
with tempfile.TemporaryDirectory() as tmp:
    preset = os.path.join(tmp, "ns.yaml")
    with open(preset, "w") as f:
        f.write(PRESET)
    proc = subprocess.run([gradsync, "run", preset, "--output", tmp], capture_output=True,
                          text=True, timeout=120)
    check(proc.returncode == 0, f"the run succeeded: {proc.stderr[-2000:]}")
    check("endpoint tcp://10.99.0.1:" in proc.stderr,
          "the shard listened on its namespace's address")
    top = os.path.realpath(os.path.join(tmp, "latest"))
    for run, model in MODEL_S.items():
        path = os.path.join(top, run, "summary.json")
        if not os.path.exists(path):
            check(False, f"{run}: summary.json written")
            continue
        step = json.load(open(path))["mean_step_s"]
        measured = step["communicate"] + step["wait"]
        check(abs(measured / model - 1) < 0.3,
              f"{run}: {measured * 1e3:.1f} ms of communication a step, model {model * 1e3:.1f} ms")
# Two simulated hosts of two ranks each: one namespace, one shaped veth and one host id per host.
HOSTS_PRESET = PRESET.replace("workers: 2", "workers: 4").replace(
    "comm: {overlap: false, timeout_s: 30}",
    "comm: {overlap: false, timeout_s: 30, backend: tcp, hierarchical: off}").replace(
    "namespaces: true}", "namespaces: true, hosts: 2}").split("runs:")[0] + \
    "runs:\n  - {name: ring-4-hosts-2}\n"
with tempfile.TemporaryDirectory() as tmp:
    preset = os.path.join(tmp, "hosts.yaml")
    with open(preset, "w") as f:
        f.write(HOSTS_PRESET)
    proc = subprocess.run([gradsync, "run", preset, "--output", tmp], capture_output=True,
                          text=True, timeout=120)
    check(proc.returncode == 0, f"hosts: the run succeeded: {proc.stderr[-2000:]}")
    check("MiB a step on the workers' links" in proc.stderr,
          "hosts: the run's line says what a step put on the links")
    path = os.path.join(os.path.realpath(os.path.join(tmp, "latest")), "ring-4-hosts-2",
                        "summary.json")
    summary = json.load(open(path)) if os.path.exists(path) else {}
    check(summary.get("backend") == "tcp", f"hosts: a flat tcp ring: {summary.get('backend')}")
    links = summary.get("host_link_bytes", [])
    check([(link["name"], link["ranks"]) for link in links] ==
          [("host 0", [0, 1]), ("host 1", [2, 3])], f"hosts: a link per host: {links}")
    check(links and all(link["sent"] > 0 and link["received"] > 0 for link in links),
          f"hosts: both links carried bytes each way: {links}")
    if len(links) == 2:
        # Only two namespaces on the bridge: what one sends, the other receives (give or take
        # the kernel's own few hundred bytes of neighbour discovery).
        check(abs(links[0]["sent"] - links[1]["received"]) < 0.01 * links[0]["sent"],
              f"hosts: host 0's sent is host 1's received: {links}")
    hosts = {entry["rank"]: entry["host"] for entry in summary.get("rank_hosts", [])}
    check(len(hosts) == 4 and hosts[0] == hosts[1] != hosts[2] == hosts[3],
          f"hosts: ranks 0, 1 share a host id, ranks 2, 3 another: {hosts}")
    check([hosts.get(0), hosts.get(2)] == [link["namespace"] for link in links],
          f"hosts: the host id is the namespace's name: {hosts}, {links}")
    # Per step the ring crosses between the hosts twice (1 -> 2, 3 -> 0), 2(N-1)/N * S each:
    # 3 S. On top: the first broadcast of the parameters (S once: S/6 a step), headers and the
    # rendezvous (under 1%); not the traffic between ranks of one host, which a host per rank
    # would put on the links too (6 S).
    per_step = summary.get("link_bytes_per_step", 0)
    check(3 * S <= per_step <= 3.5 * S,
          f"hosts: {per_step / 1e6:.2f} MB a step on the links, the ring's crossings "
          f"{3 * S / 1e6:.0f} MB")

after = ours()
check(after == before, f"nothing left behind: {sorted(after - before)}, "
                      f"nothing of before gone: {sorted(before - after)}")

# Ctrl-C in the middle of a run: the launcher stops its processes, says why, and still deletes
# the namespaces, veths and bridge it made (the kernel would keep them after the process died).
with tempfile.TemporaryDirectory() as tmp:
    preset = os.path.join(tmp, "long.yaml")
    with open(preset, "w") as f:
        f.write(PRESET.replace("steps: 6", "steps: 100000"))
    # SIGINT as a terminal sends it, also where this script runs with it ignored (a background
    # job of a script): gradsync leaves an ignored SIGINT ignored, as it should.
    run = subprocess.Popen([gradsync, "run", preset, "--output", tmp], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 30
    made = 2 + 2 + 1  # two namespaces, the outer ends of two veths, the bridge
    while time.time() < deadline and len(ours() - before) < made:
        time.sleep(0.1)
    time.sleep(1.0)  # the ranks are training now
    started = time.time()
    run.send_signal(signal.SIGINT)
    try:
        _, err = run.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        run.kill()
        _, err = run.communicate()
    took = time.time() - started
    last = err.strip().splitlines()[-1] if err.strip() else ""
    check(run.returncode == 130, f"an interrupted run exits 128 + SIGINT (130): {run.returncode}")
    check("interrupted by SIGINT; stopped the 2 process(es)" in last,
          f"it says it was interrupted: {last!r}")
    check(took < 10, f"it ended {took:.1f} s after SIGINT")
left = ours()
check(left == before, f"nothing left behind after SIGINT: {sorted(left - before)}")

check.finish()
