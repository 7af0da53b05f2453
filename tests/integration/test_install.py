"""`cmake --install` into a temporary prefix gives a gradsync that runs on its own.

Installs the build, then from a folder outside the source tree: the installed binary runs
`gradsync run quickstart --set train.epochs=1` (its presets found in <prefix>/share), runs a
preset that exists only in the installed presets folder (so the source tree's cannot have
served it), and the installed plotting script draws the results.
Usage: test_install.py BUILD_DIR
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

from checks import Checks

build = sys.argv[1]
check = Checks()

with tempfile.TemporaryDirectory() as tmp:
    prefix = os.path.join(tmp, "prefix")
    proc = subprocess.run(["cmake", "--install", build, "--prefix", prefix],
                          capture_output=True, text=True, timeout=120)
    check(proc.returncode == 0, f"cmake --install: {proc.stderr[-400:]}")
    binary = os.path.join(prefix, "bin", "gradsync")
    presets = os.path.join(prefix, "share", "gradsync", "presets")
    plots = os.path.join(prefix, "share", "gradsync", "plots", "plot_results.py")
    for path in (binary, os.path.join(presets, "quickstart.yaml"), plots):
        check(os.path.isfile(path), f"installed: {os.path.relpath(path, prefix)}")
    work = os.path.join(tmp, "work")
    os.makedirs(work)
    run = subprocess.run([binary, "run", "quickstart", "--set", "train.epochs=1",
                          "--output", "results"], capture_output=True, text=True, timeout=300,
                         cwd=work)
    summaries = glob.glob(os.path.join(work, "results", "quickstart-*", "*", "summary.json"))
    check(run.returncode == 0 and len(summaries) == 4,
          f"quickstart ran from the installed binary ({len(summaries)} summaries): "
          f"{run.stderr[-300:]}")
    # A preset only the installed folder has.
    shutil.copy(os.path.join(presets, "quickstart.yaml"), os.path.join(presets, "installed-only.yaml"))
    only = subprocess.run([binary, "run", "installed-only", "--set", "train.epochs=1", "--only",
                           "single", "--output", "results"], capture_output=True, text=True,
                          timeout=300, cwd=work)
    check(only.returncode == 0 and glob.glob(os.path.join(work, "results", "installed-only-*")),
          f"a preset found in <prefix>/share/gradsync/presets: {only.stderr[-300:]}")
    latest = os.path.join(work, "results", "latest")
    plot = subprocess.run(["/usr/bin/python3", plots, latest], capture_output=True, text=True,
                          timeout=300, cwd=work)
    check(plot.returncode == 0 and glob.glob(os.path.join(latest, "plots", "*.png")),
          f"the installed plot script drew the results: {plot.stderr[-300:]}")
check.finish()
