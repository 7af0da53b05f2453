#!/usr/bin/env python3
"""Runs the MPI communicator's tests under the real mpirun, bounded in time.

  run_mpi_tests.py collectives TEST_BINARY            every default case, for 1, 2, 3, 4 ranks
  run_mpi_tests.py stall TEST_BINARY                  3 ranks, rank 2 stops issuing: the others
                                                      name it and the job ends, non-zero, in time
  run_mpi_tests.py abort TEST_BINARY                  3 ranks, rank 1 aborts: the job ends at once
  run_mpi_tests.py destroyed TEST_BINARY              3 ranks, rank 0 destroys its communicator
                                                      mid-collective: the job ends at once

Each runs twice: once as gradsync starts MPI (MPI_THREAD_MULTIPLE: blocking collectives, watched
by the runner's watchdog thread), once with the test binary starting MPI at
MPI_THREAD_SERIALIZED itself (--mpi-thread=serialized: non-blocking collectives, polled), so
that both of the backend's paths pass the same checks.
  run_mpi_tests.py worker GRADSYNC PRESET             `gradsync worker` with comm.backend mpi and
                                                      no MPI launcher: one line saying how

Exits 77 (ctest's SKIP_RETURN_CODE) when mpirun is not installed (openmpi-bin).
"""
import os
import shutil
import subprocess
import sys
import time

SKIP = 77


# The thread levels the test binary runs at, and the options that make it start MPI at each.
LEVELS = {"multiple": [], "serialized": ["--mpi-thread=serialized"]}


def mpirun_command(ranks):
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    # --oversubscribe: more ranks than this machine's cores (2 on CI) is the point here.
    # btl_vader_single_copy_mechanism none: Open MPI's shared-memory transport copies large
    # messages with process_vm_readv (CMA) by default, which containers without CAP_SYS_PTRACE
    # refuse ("Read -1, expected ..., errno = 1"); copying through the shared segment works
    # everywhere, and these tests check results, not speed.
    # --bind-to none --host localhost:N: as gradsync starts its ranks (launch/mpirun_command.h),
    # where mpirun counts N slots and does not see the host oversubscribed; gradsync must (the
    # MPI runtime's yield, checked by a test case).
    return ["mpirun", *root, "--oversubscribe", "--bind-to", "none", "--host",
            f"localhost:{ranks}", "--mca", "btl_vader_single_copy_mechanism", "none",
            "-np", str(ranks)]


def run(command, limit, env=None):
    """(exit code, output, seconds); a run past `limit` seconds fails the test."""
    began = time.monotonic()
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=limit, env=env)
    except subprocess.TimeoutExpired as e:
        out = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace")
        sys.exit(f"FAIL: {' '.join(command)} still running after {limit} s:\n{out}")
    return done.returncode, done.stdout, time.monotonic() - began


def fail(message, output):
    sys.exit(f"FAIL: {message}\n--- output ---\n{output}")


def collectives(binary):
    for level, options in LEVELS.items():
        for ranks in (1, 2, 3, 4):
            code, out, seconds = run([*mpirun_command(ranks), binary, *options], limit=60)
            if code != 0:
                fail(f"{level}, {ranks} ranks: exit code {code}", out)
            print(f"{level}, {ranks} ranks: every case passed in {seconds:.1f} s")


def job_ends(binary, case, expected, limit):
    """At each thread level, the job of 3 ranks running `case` ends non-zero within `limit` s,
    saying each of `expected`."""
    for level, options in LEVELS.items():
        code, out, seconds = run(
            [*mpirun_command(3), binary, *options, "--no-skip", "-tc=" + case], limit=60)
        if code == 0:
            fail(f"{level}, '{case}': the job exited 0", out)
        if seconds > limit:
            fail(f"{level}, '{case}': the job took {seconds:.1f} s to end, over {limit} s", out)
        for part in expected:
            if part not in out:
                fail(f"{level}, '{case}': the output does not say '{part}'", out)
        print(f"{level}, '{case}': ended with exit code {code} after {seconds:.1f} s")
        print("\n".join(line for line in out.splitlines() if line.startswith("gradsync: error")))


def worker(gradsync, preset):
    # No launcher at all: the MPI families' variables are dropped, as is torchrun's.
    launcher = ("OMPI_", "PMI_", "PMIX_", "SLURM_", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    env = {k: v for k, v in os.environ.items() if not k.startswith(launcher)}
    code, out, _ = run([gradsync, "worker", preset, "--only", "allreduce-2", "--set",
                        "comm.backend=mpi"], limit=60, env=env)
    lines = [line for line in out.splitlines() if line.strip()]
    if code == 0 or len(lines) != 1:
        fail(f"expected one line and a non-zero exit, got exit code {code}", out)
    for part in ("comm.backend", "mpirun -np", "gradsync worker"):
        if part not in lines[0]:
            fail(f"the line does not say '{part}'", out)
    print(lines[0])


def main():
    mode = sys.argv[1]
    if mode != "worker" and shutil.which("mpirun") is None:
        print("mpirun not found (apt-get install openmpi-bin): skipped")
        return SKIP
    if mode == "collectives":
        collectives(sys.argv[2])
    elif mode == "stall":
        # comm timeout 2 s, then up to 2 s of grace reading the others' progress, plus start-up.
        job_ends(sys.argv[2], "*stops issuing*",
                 ["waiting for rank 2, which never reached it", "MPI_Abort"], limit=15)
    elif mode == "abort":
        job_ends(sys.argv[2], "*abort ends*",
                 ["rank 1 aborted the job: disk full (on purpose)"], limit=10)
    elif mode == "destroyed":
        job_ends(sys.argv[2], "*destroyed mid-collective*",
                 ["rank 0: the communicator was destroyed while collective #1 allreduce of"],
                 limit=10)
    elif mode == "worker":
        worker(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown mode '{mode}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
