"""The shared-memory figure, run the way docs/benchmarks.md's is made:
scripts/bench-shm-vs-mpi.sh measures gradsync's shm and gloo backends and Open MPI over vader
(mpirun --mca btl self,vader, MPI_Allreduce called directly) in turn, one round at N = 2.
Checks that every side printed a busbw for every size from 64 KiB to 64 MiB, that the memory
copy yardstick is there, and that the ratios printed are the busbws' own. No speed is asserted:
the figure is the script's. Skips (77) without mpirun.
"""
import re
import sys

from checks import Checks, run_mpi_peer_script

gradsync, script = sys.argv[1], sys.argv[2]
code, out = run_mpi_peer_script(script, gradsync, "--ranks", "2", "--rounds", "1")
check = Checks()
check(code == 0, f"the script exited {code}: {out[-3000:]}")
copies = re.findall(r"# memory copy +(\d+) B: +([\d.]+) GB/s", out)
check(len(copies) == 6 and all(float(c[1]) > 0 for c in copies),
      f"a memory copy figure per size: {copies}")
rows = re.findall(r"^ +(\d+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+)x +([\d.]+)x$", out, re.M)
sizes = [int(r[0]) for r in rows]
check(sizes == [65536 * 4 ** i for i in range(6)],
      f"a row per size, 64 KiB to 64 MiB: {sizes}; the script printed: {out[-2000:]}")
for size, shm, vader, gloo, shm_vader, shm_gloo in rows:
    check(float(shm) > 0 and float(vader) > 0 and float(gloo) > 0, f"{size}: three busbws")
    check(abs(float(shm_vader) - float(shm) / float(vader)) < 0.011 * float(shm_vader) + 0.01,
          f"{size}: shm/vader {shm_vader} is {shm}/{vader}")
check.finish()
