"""`network.slow_ranks`: one ps worker on a slower emulated link is the run's named straggler.

tiny_slow_rank.yaml runs three async ps workers, rank 1 on slow_link_gbps and the others on
link_gbps. async workers never wait for each other, so the slow link lengthens rank 1's steps
alone. Checked:
1. summary.json's slowest_rank is rank 1, and the printed summary says so;
2. its p99 step time exceeds the others' (their median p99) by about the extra time its link
   takes to send a step's push: bytes_sent per step x 8 / slow rate, less the same at the
   others' rate. What it pushes leaves at its link's rate; the replies come back through the
   shard's faster link, so the send direction is the delay. The check accepts anything from
   half of that to twice it plus 20 ms: a 2-core machine shared with other tests stretches
   every step's other parts (the others' p99 too), but a delay missing or doubled is a bug.
"""
import csv
import json
import os
import re
import sys
import tempfile

from checks import Checks, run_preset

gradsync, preset = sys.argv[1], sys.argv[2]
check = Checks()
RUN = "ps-async-slow-1"


def network_key(config_text, key):
    """A number under `network:` in a run's config.yaml (written by to_yaml: one key a line)."""
    section = config_text.split("\nnetwork:\n", 1)[1]
    return float(re.search(rf"^  {key}: ([0-9.e+-]+)$", section, re.M).group(1))


with tempfile.TemporaryDirectory() as out:
    proc, top = run_preset(check, gradsync, preset, out, timeout=120)
    run_dir = os.path.join(top, RUN)
    path = os.path.join(run_dir, "summary.json")
    check(os.path.exists(path), f"{RUN} wrote summary.json")
    if os.path.exists(path):
        summary = json.load(open(path))
        slowest = summary.get("slowest_rank") or {}
        check(slowest.get("rank") == 1, f"rank 1 is named slowest: {slowest}")
        said = f"slowest rank of {RUN}: rank 1, p99 step "
        check(said in proc.stdout, f"the printed summary names it: {said!r} in {proc.stdout!r}")
        p99 = {p["rank"]: p["p99"] for p in summary["step_time_s"]}
        others = sorted(v for r, v in p99.items() if r != 1)
        check(len(p99) == 3 and slowest.get("p99_s") == p99.get(1),
              f"its p99 is its own in step_time_s: {slowest} vs {p99}")
        check(abs(slowest.get("others_median_p99_s", -1) - sum(others) / 2) < 1e-9,
              f"against the median of the other two: {slowest} vs {others}")

        config = open(os.path.join(run_dir, "config.yaml")).read()
        fast, slow = network_key(config, "link_gbps"), network_key(config, "slow_link_gbps")
        rows = [r for r in csv.DictReader(open(os.path.join(run_dir, "metrics.csv")))
                if r["rank"] == "1"]
        sent = sum(int(r["bytes_sent"]) for r in rows) / max(len(rows), 1)
        expected = sent * 8 / 1e9 * (1 / slow - 1 / fast)
        excess = slowest.get("p99_s", 0) - slowest.get("others_median_p99_s", 0)
        check(expected > 0.02,
              f"the preset injects a delay worth measuring: {expected * 1e3:.1f} ms")
        check(0.5 * expected <= excess <= 2 * expected + 0.02,
              f"rank 1's p99 exceeds the others' by about the injected delay: "
              f"{excess * 1e3:.1f} ms, expected {expected * 1e3:.1f} ms "
              f"({sent:.0f} B a step at {slow} against {fast} Gbit/s)")

check.finish()
