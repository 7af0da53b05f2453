"""CURVE through the real processes: `gradsync server --gen-keys` writes an owner-only key
file that it never overwrites; a ps run whose shards and workers share it trains; a worker
holding another key pair is refused by a live shard within its timeout, with a message that
names the shard, and the shard keeps running."""
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import time

from checks import Checks, free_port

gradsync = sys.argv[1]
check = Checks()
PRESET = """strategy: ps
workers: 2
data: {{kind: synthetic, train_samples: 2048, test_samples: 256}}
model: {{hidden: [32]}}
train: {{steps: 30, batch: 16}}
comm: {{timeout_s: 30}}
ps: {{servers: 1, mode: sync, curve_keys: {keys}}}
output: {{progress: off}}
runs:
  - name: curve
"""

with tempfile.TemporaryDirectory() as tmp:
    good, other = os.path.join(tmp, "good.key"), os.path.join(tmp, "other.key")
    for path in (good, other):
        r = subprocess.run([gradsync, "server", "--gen-keys", path], capture_output=True, text=True)
        check(r.returncode == 0, f"--gen-keys {path}: {r.stderr}")
    mode = stat.S_IMODE(os.stat(good).st_mode)
    check(mode == 0o600, f"the key file is owner-only ({oct(mode)})")
    before = open(good).read()
    r = subprocess.run([gradsync, "server", "--gen-keys", good], capture_output=True, text=True)
    check(r.returncode != 0 and good in r.stderr, f"an existing key file is refused: {r.stderr!r}")
    check(open(good).read() == before, "and left as it was")

    # A run whose shard and workers share the key trains.
    preset = os.path.join(tmp, "curve.yaml")
    with open(preset, "w") as f:
        f.write(PRESET.format(keys=good))
    r = subprocess.run([gradsync, "run", preset, "--output", tmp], capture_output=True, text=True,
                       timeout=120)
    check(r.returncode == 0, f"an encrypted run trains: {r.stderr[-1500:]}")
    run_dir = os.path.realpath(os.path.join(tmp, "latest", "curve"))
    if r.returncode == 0:
        check(json.load(open(os.path.join(run_dir, "summary.json")))["steps"] == 30, "30 steps")

    # A live shard holding the good key; a worker holding the other key tries to join.
    port = free_port()
    # The shard fails on its own comm.timeout_s after it starts if no worker says HELLO: 30 s
    # (from the preset) keeps it serving however slowly the intruder starts on a loaded machine.
    config = os.path.join(run_dir, "config.yaml")
    config_text = open(config).read()
    check(re.search(r"^  timeout_s: 30$", config_text, re.MULTILINE) is not None,
          f"the run's config.yaml holds comm.timeout_s 30 for the live shard: "
          f"{re.findall(r'timeout_s: .*', config_text)}")
    shard = subprocess.Popen([gradsync, "server", "--config", config, "--run-dir", run_dir,
                              "--shard", "0", "--port", str(port)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The shard prints its endpoint once it listens: only then can the intruder be refused.
    ready = shard.stdout.readline()
    check(ready.startswith("endpoint "), f"the shard says where it listens: {ready!r}")
    intruder_config = os.path.join(tmp, "intruder.yaml")
    # Only the intruder waits briefly: it gives up after 1 s, well inside the shard's 30 s.
    intruder_text, replaced = re.subn(r"^  timeout_s: 30$", "  timeout_s: 1",
                                      config_text.replace(good, other), flags=re.MULTILINE)
    check(replaced == 1 and other in intruder_text,
          f"the intruder's config holds the other key and timeout_s 1 ({replaced} replaced)")
    with open(intruder_config, "w") as dst:
        dst.write(intruder_text)
    env = dict(os.environ, RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
    started = time.time()
    r = subprocess.run([gradsync, "worker", "--config", intruder_config, "--run-dir", tmp,
                        "--ps-endpoints", f"tcp://127.0.0.1:{port}"],
                       env=env, capture_output=True, text=True, timeout=60)
    elapsed = time.time() - started
    last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    check(r.returncode != 0, "the worker with the wrong key fails")
    check(f"127.0.0.1:{port}" in last, f"its message names the shard: {last!r}")
    # Its 1 s timeout plus starting up, with room for a loaded machine, and well inside the
    # shard's 30 s: the shard checked next has had no reason to give up yet.
    check(elapsed < 10, f"the intruder gives up within 10 s (its timeout is 1 s): {elapsed:.1f} s")
    check(shard.poll() is None, "the shard is still serving")
    shard.kill()
    _, shard_log = shard.communicate()
    check("refused" in shard_log and "CURVE" in shard_log,
          f"the shard logged the refusal: {shard_log!r}")

check.finish()
