"""zero's memory and traffic, measured per rank (one process a rank, each with its own ledger):

1. every stage's peak model-state bytes within 5% of its formula at N = 1, 2 and 4: the
   parameter, gradient and momentum shards (3P/N), plus at stage 1 the model's full parameters
   and gradients (2P), at stage 2 its full parameters and two layer gradients (the one being
   computed, the one being reduced), at stage 3 the window of layers (two gathered, two layer
   gradients: 4 layers of equal size);
2. stage 3's sharded part (its peak less the window, which does not depend on N) falling as
   1/N exactly;
3. bytes sent and received per step by every rank: stages 1 and 2 exactly allreduce's,
   stage 3 exactly 1.5x (two all-gathers and one reduce-scatter of every layer).
"""
import csv
import json
import os
import sys
import tempfile

from checks import Checks, run_preset

gradsync, preset = sys.argv[1], sys.argv[2]
check = Checks()

LAYER = 64 * 64 + 64  # floats: four equal layers
LAYERS = 4
P = LAYERS * LAYER


def formula(stage, n):
    shards = 3 * P // n
    extra = {1: 2 * P, 2: P + 2 * LAYER, 3: 4 * LAYER}[stage]
    return 4 * (shards + extra)


def step_bytes(run_dir):
    """{(rank, step): (sent, received)} from metrics.csv."""
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return {(int(r["rank"]), int(r["step"])): (int(r["bytes_sent"]), int(r["bytes_received"]))
                for r in csv.DictReader(f)}


with tempfile.TemporaryDirectory() as out:
    _, top = run_preset(check, gradsync, preset, out, 240)
    summaries = {}
    for name in sorted(os.listdir(top)):
        path = os.path.join(top, name, "summary.json")
        if os.path.exists(path):
            summaries[name] = json.load(open(path))
    for n in (1, 2, 4):
        for stage in (1, 2, 3):
            name = f"zero{stage}-{n}"
            peak = summaries[name]["peak_model_state_bytes"]
            want = formula(stage, n)
            print(f"{name}: peak {peak} bytes per rank, formula {want}")
            check(abs(peak - want) <= 0.05 * want,
                  f"{name}: peak model state {peak} bytes, formula {want}")
    sharded = {n: summaries[f"zero3-{n}"]["peak_model_state_bytes"] - 4 * 4 * LAYER
               for n in (1, 2, 4)}
    for n in (2, 4):
        check(sharded[n] * n == sharded[1],
              f"stage 3's shards at N = {n}: {sharded[n]} bytes, 1/{n} of {sharded[1]}")
    for n in (2, 4):
        ring = step_bytes(os.path.join(top, f"allreduce-{n}"))
        for stage, factor in ((1, 1), (2, 1), (3, 1.5)):
            name = f"zero{stage}-{n}"
            moved = step_bytes(os.path.join(top, name))
            check(moved.keys() == ring.keys(), f"{name}: a row per rank and step")
            bad = [k for k in ring if k in moved and
                   (moved[k][0] != factor * ring[k][0] or moved[k][1] != factor * ring[k][1])]
            check(not bad, f"{name}: bytes per step {factor}x allreduce's, not at {bad[:3]}"
                           f" ({[moved[k] for k in bad[:3]]} against {[ring[k] for k in bad[:3]]})")
check.finish()
