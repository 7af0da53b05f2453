"""`gradsync model`: the default table (one row per N, 100 columns at most, values from the
alpha-beta formulas), one-line errors, and --calibrate --json on a fabricated results folder
whose measurements were generated from a known link."""
import json
import os
import subprocess
import sys
import tempfile

from checks import Checks

gradsync = sys.argv[1]
check = Checks()


def run(*args):
    return subprocess.run([gradsync, "model", *args], capture_output=True, text=True, timeout=60)


def table_rows(stdout):
    """Data rows of the markdown table: lists of cell strings."""
    rows = []
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].isdigit():
            rows.append(cells)
    return rows


CHUNK = 512 * 1024  # a parameter-server chunk in bytes (wire::kChunkKeys floats)

# The defaults: N = 1..1024, ps with 1 and 4 shards.
proc = run()
check(proc.returncode == 0, f"default exit {proc.returncode}: {proc.stderr}")
rows = table_rows(proc.stdout)
check([r[0] for r in rows] == [str(2**i) for i in range(11)], f"rows N: {[r[0] for r in rows]}")
check(all(len(line) <= 100 for line in proc.stdout.splitlines()),
      "every line within 100 columns:\n" + proc.stdout)
check("102.2 MB" in proc.stdout and "10 Gbit/s" in proc.stdout and "25 us" in proc.stdout,
      "header names S, bandwidth and alpha:\n" + proc.stdout)
if rows:
    # Columns: N, dp, ps1, ps4, ring (ms), dp, ps1, ps4, ring (MB), ps wins K>=.
    one = rows[0]
    check(one[1] == "0.0" and one[4] == "0.0", f"N=1: dp and ring cost nothing: {one}")
    # ps with one shard at N=1: S one way, the last 512 KiB chunk's reply, 2 latencies.
    check(abs(float(one[2]) - ((102.228128e6 + CHUNK) * 8 / 10e9 * 1e3 + 0.05)) < 0.1,
          f"N=1: ps moves S plus a chunk plus 2 latencies: {one}")
    check(rows[1][9] == "never", f"N=2: ps never beats the ring: {rows[1]}")
    dp_ms = [float(r[1]) for r in rows[1:]]
    check(all(b > 1.9 * a for a, b in zip(dp_ms, dp_ms[1:])), f"dp grows linearly: {dp_ms}")

# Hand-computed: N=4, S=100 MB (decimal), no latency, 8 Gbit/s = 1 GB/s: ring 150 MB = 150 ms,
# ps with 2 shards 200 ms + 4 drained 512 KiB chunks (2.1 ms), dp 600 ms; busiest node 300,
# 400 and 600 MB; ps wins from K=3.
proc = run("--bytes", "100000000", "--workers", "4", "--servers", "2", "--latency-us", "0",
           "--gbps", "8", "--bucket-mb", "1000")
rows = table_rows(proc.stdout)
check(proc.returncode == 0 and rows == [["4", "600.0", "202.1", "150.0", "600.0", "400.0",
                                         "300.0", "3"]], f"hand-computed row: {rows}")

# One-line errors: exit 2 for what the command line itself refuses (a malformed or
# out-of-range value), 1 for what fails once the command runs.
for args, needle, code in [(["--bytes", "lots"], "--bytes", 2), (["--json"], "--calibrate", 2),
                           (["--calibrate", "/nonexistent/results"], "/nonexistent/results", 1),
                           (["--workers", "0"], "--workers", 2)]:
    proc = run(*args)
    lines = proc.stderr.strip().splitlines()
    check(proc.returncode == code and needle in proc.stderr,
          f"{args}: exit {proc.returncode}, stderr {proc.stderr!r}")
    check(len(lines) == 1 and lines[0].startswith("gradsync: error:"),
          f"{args}: one line: {proc.stderr!r}")

# --calibrate on runs generated from alpha = 40 us, 5 Gbit/s.
ALPHA, BETA = 40e-6, 8 / 5e9
PARAMS = 1_500_000  # 6 MB


def predicted(scheme, n, k, b):
    s = PARAMS * 4
    msgs, nbytes = {"dp": (2 * (n - 1), 2 * (n - 1) * s),
                    "ps": (2, max(s, n * s / k) + max(n, k) * min(CHUNK, s / k)),
                    "allreduce": (2 * (n - 1) * b, 2 * (n - 1) / n * s)}[scheme]
    return msgs * ALPHA + nbytes * BETA


with tempfile.TemporaryDirectory() as tmp:
    runs = [("allreduce-2", "allreduce", 2, 1, 25), ("allreduce-8", "allreduce", 8, 1, 1),
            ("dp-4", "dp", 4, 1, 25), ("ps-4", "ps", 4, 2, 25), ("single-1", "single", 1, 1, 25)]
    for name, strategy, n, k, bucket_mb in runs:
        os.makedirs(os.path.join(tmp, name))
        with open(os.path.join(tmp, name, "config.yaml"), "w") as f:
            f.write(f"strategy: {strategy}\nworkers: {n}\ndata: {{kind: synthetic}}\n"
                    f"ps: {{servers: {k}}}\ncomm: {{bucket_mb: {bucket_mb}}}\n"
                    f"runs:\n  - name: {name}\n")
        if strategy == "single":
            continue  # skipped before summary.json is read
        buckets = -(-PARAMS * 4 // (bucket_mb << 20))
        t = predicted(strategy, n, k, buckets)
        with open(os.path.join(tmp, name, "summary.json"), "w") as f:
            json.dump({"parameters": PARAMS,
                       "mean_step_s": {"compute": 0.1, "communicate": 0.6 * t, "wait": 0.4 * t}}, f)
    proc = run("--calibrate", tmp, "--json")
    check(proc.returncode == 0, f"calibrate exit {proc.returncode}: {proc.stderr}")
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        out = {}
        check(False, "--json prints one JSON object: " + proc.stdout)
    if out:
        check(abs(out["alpha_s"] / ALPHA - 1) < 1e-6, f"alpha recovered: {out['alpha_s']}")
        check(abs(out["gbps"] / 5 - 1) < 1e-6, f"bandwidth recovered: {out['gbps']}")
        check(abs(out["beta_s_per_byte"] / BETA - 1) < 1e-6, "beta recovered")
        check([r["run"] for r in out["runs"]] == ["allreduce-2", "allreduce-8", "dp-4", "ps-4"],
              f"runs: {out['runs']}")
        check(all(abs(r["error"]) < 1e-6 for r in out["runs"]), f"errors ~0: {out['runs']}")
        check(out["runs"][1]["scheme"] == "ring" and out["runs"][1]["workers"] == 8
              and out["runs"][3]["servers"] == 2, f"fields: {out['runs']}")
        check(len(out["skipped"]) == 1 and out["skipped"][0].startswith("single-1"),
              f"skipped: {out['skipped']}")
    proc = run("--calibrate", tmp)
    check(proc.returncode == 0 and "alpha = 40.0 us" in proc.stdout and "5 Gbit/s" in proc.stdout,
          "text calibration:\n" + proc.stdout + proc.stderr)
    check("skipped single-1" in proc.stderr, "skip note on stderr: " + proc.stderr)

check.finish()
