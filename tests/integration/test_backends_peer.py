"""The backends figure, run the way docs/benchmarks.md's is made:
scripts/bench-backends-vs-libraries.sh measures gradsync's tcp, gloo and mpi backends and the
libraries called directly (gloo_allreduce_plain; mpi_allreduce_plain under mpirun over TCP) in
turn, one round at N = 2. Checks that every side printed a busbw for every size from 1 to
64 MiB in both forms, and that the ratios printed are those busbws' own: tcp against the better
plain library, each wrapper against its own. No speed is asserted: the figure is the script's.
Skips (77) without mpirun.
"""
import re
import sys

from checks import Checks, run_mpi_peer_script

gradsync, script = sys.argv[1], sys.argv[2]
code, out = run_mpi_peer_script(script, gradsync, "--ranks", "2", "--rounds", "1")
check = Checks()
check(code == 0, f"the script exited {code}: {out[-3000:]}")
pair = r"([\d.]+) / ([\d.]+)"
rows = re.findall(r"^\| (\d+) MiB \| " + r" \| ".join([pair] * 8) + r" \|$", out, re.M)
check([int(r[0]) for r in rows] == [1, 4, 16, 64], f"a row per size, 1 to 64 MiB: {out[-2000:]}")
for row in rows:
    size, values = row[0], [float(v) for v in row[1:]]
    # tcp, gloo, mpi, gloo-plain, mpi-plain (out of place, in place), then the three ratios.
    sides = {name: values[2 * i:2 * i + 2] for i, name in
             enumerate(["tcp", "gloo", "mpi", "gloo-plain", "mpi-plain"])}
    ratios = {name: values[10 + 2 * i:12 + 2 * i] for i, name in
              enumerate(["tcp/best", "gloo/plain", "mpi/plain"])}
    check(all(v > 0 for pair_ in sides.values() for v in pair_), f"{size} MiB: ten busbws {sides}")
    for form in (0, 1):
        # One round: each ratio is the two busbws' own, to the printed precision.
        expected = {
            "tcp/best": sides["tcp"][form] / max(sides["gloo-plain"][form], sides["mpi-plain"][form]),
            "gloo/plain": sides["gloo"][form] / sides["gloo-plain"][form],
            "mpi/plain": sides["mpi"][form] / sides["mpi-plain"][form],
        }
        for name, value in expected.items():
            check(abs(ratios[name][form] - value) < 0.03 * value + 0.01,
                  f"{size} MiB {name} form {form}: printed {ratios[name][form]}, busbws give {value:.3f}")
check.finish()
