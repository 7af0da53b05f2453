"""`cmake --install` into a temporary prefix gives a gradsync that runs on its own.

Installs the build, then from a folder outside the source tree: the installed binary runs
`gradsync run quickstart --set train.epochs=1` (its presets found in <prefix>/share), runs a
preset that exists only in the installed presets folder (so the source tree's cannot have
served it), and the installed plotting script draws the results.

The same prefix is a CMake package: a copy of tests/install_consumer/ configures against it
alone (CMAKE_PREFIX_PATH), links gradsync::strategies and runs one step of two strategies; the
headers are under include/gradsync/. The build's own flags stay out of the package: the exported
targets name no -march, sanitizer or warning flag, checked on this build's export and on one
configured with GRADSYNC_NATIVE=ON and sanitizers. Finally `make install DESTDIR=D PREFIX=/usr`
(the Makefile's, as a Debian package build runs it) installs the same files under D/usr.
Usage: test_install.py BUILD_DIR
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

from checks import Checks

build = os.path.abspath(sys.argv[1])
source = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
check = Checks()
# Flags of the build that a program linking the package must never inherit.
BUILD_ONLY_FLAGS = ("-march", "-fsanitize", "-fno-sanitize", "-Werror", "-Wall", "-O3")


def cache_value(build_dir, name):
    """`name`'s value in build_dir/CMakeCache.txt, "" when unset."""
    with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split("=", 1)[1].strip()
    return ""


def leaked_flags(cmake_dir):
    """(file, flag) for each build-only flag in the gradsyncTargets*.cmake files of cmake_dir."""
    found = []
    for path in sorted(glob.glob(os.path.join(cmake_dir, "gradsyncTargets*.cmake"))):
        text = open(path).read()
        found += [(os.path.basename(path), flag) for flag in BUILD_ONLY_FLAGS if flag in text]
    return found


def installed_files(root):
    """Every file under root, relative to it (less the plot scripts' __pycache__)."""
    return sorted(os.path.relpath(os.path.join(here, name), root)
                  for here, _, names in os.walk(root) for name in names
                  if "__pycache__" not in here)


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

    # The CMake package: headers under include/gradsync/, the config, no build flags in it.
    for header in ("strategies/sync_strategy.h", "strategies/allreduce/allreduce_strategy.h",
                   "common/error.h", "model/optimizer/sgd.h"):
        check(os.path.isfile(os.path.join(prefix, "include", "gradsync", header)),
              f"installed: include/gradsync/{header}")
    check(not os.path.exists(os.path.join(prefix, "include", "common")),
          "no gradsync folder directly in <prefix>/include")
    configs = glob.glob(os.path.join(prefix, "lib*", "**", "gradsyncConfig.cmake"), recursive=True)
    check(len(configs) == 1, f"installed: lib/cmake/gradsync/gradsyncConfig.cmake ({configs})")
    cmake_dir = os.path.dirname(configs[0]) if configs else prefix
    check(glob.glob(os.path.join(cmake_dir, "gradsyncTargets*.cmake")),
          "installed: gradsyncTargets.cmake")
    leaks = leaked_flags(cmake_dir)
    check(not leaks, f"no build-only flag in the exported targets: {leaks}")

    # A project of its own, outside the source tree, that knows only the prefix. A sanitizer
    # build's libraries need the sanitizer's runtime: its consumer asks for it at link time,
    # as any program linking them would (the package itself never adds it).
    consumer = os.path.join(tmp, "consumer")
    shutil.copytree(os.path.join(source, "tests", "install_consumer"), consumer)
    configure = ["cmake", "-S", consumer, "-B", os.path.join(consumer, "build"),
                 f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release",
                 f"-DCMAKE_CXX_COMPILER={cache_value(build, 'CMAKE_CXX_COMPILER')}"]
    sanitize = cache_value(build, "GRADSYNC_SANITIZE")
    if sanitize:
        configure.append(f"-DCMAKE_EXE_LINKER_FLAGS=-fsanitize={sanitize}")
    proc = subprocess.run(configure, capture_output=True, text=True, timeout=120)
    check(proc.returncode == 0, f"find_package(gradsync) from the prefix: {proc.stdout[-400:]} "
          f"{proc.stderr[-800:]}")
    proc = subprocess.run(["cmake", "--build", os.path.join(consumer, "build")],
                          capture_output=True, text=True, timeout=300)
    check(proc.returncode == 0, f"the consumer built against gradsync::strategies: "
          f"{proc.stdout[-1500:]} {proc.stderr[-800:]}")
    flags_file = os.path.join(consumer, "build", "CMakeFiles", "consumer.dir", "flags.make")
    flags = open(flags_file).read() if os.path.isfile(flags_file) else ""
    check(not [flag for flag in BUILD_ONLY_FLAGS[:4] if flag in flags],
          f"the consumer compiles without the build's flags: {flags[-400:]}")
    if proc.returncode == 0:
        run = subprocess.run([os.path.join(consumer, "build", "consumer")], capture_output=True,
                             text=True, timeout=120, cwd=work)
        check(run.returncode == 0 and "as expected" in run.stdout,
              f"the consumer's strategies stepped as expected: {run.stdout[-300:]} "
              f"{run.stderr[-500:]}")

    # The options that tune or instrument the build, on: still nothing of them in the package
    # (configure only, CPU only, in a scratch build folder: the export is written at generate).
    flagged = os.path.join(tmp, "flagged")
    proc = subprocess.run(["cmake", "-S", source, "-B", flagged, "-DGRADSYNC_NATIVE=ON",
                           "-DGRADSYNC_SANITIZE=address,undefined", "-DGRADSYNC_CUDA=OFF",
                           "-DGRADSYNC_BUILD_TESTS=OFF", "-DGRADSYNC_BUILD_BENCHMARKS=OFF",
                           f"-DCMAKE_CXX_COMPILER={cache_value(build, 'CMAKE_CXX_COMPILER')}"],
                          capture_output=True, text=True, timeout=120)
    check(proc.returncode == 0, f"configure with GRADSYNC_NATIVE and sanitizers: "
          f"{proc.stderr[-600:]}")
    exported = glob.glob(os.path.join(flagged, "CMakeFiles", "Export", "*"))
    common_flags = os.path.join(flagged, "common", "CMakeFiles", "gradsync_common.dir",
                                "flags.make")
    built_with = open(common_flags).read() if os.path.isfile(common_flags) else ""
    check("-march=native" in built_with and "-fsanitize=address,undefined" in built_with,
          "GRADSYNC_NATIVE and the sanitizers reach the libraries built here")
    check(len(exported) == 1 and glob.glob(os.path.join(exported[0], "gradsyncTargets*.cmake"))
          and not leaked_flags(exported[0]),
          f"...and never the exported targets: {exported} "
          f"{leaked_flags(exported[0]) if exported else ''}")

    # The Debian-style round trip: `make install` with DESTDIR and PREFIX.
    destdir = os.path.join(tmp, "destdir")
    proc = subprocess.run(["make", "--no-print-directory", "-C", source, "install",
                           f"BUILD={build}", f"DESTDIR={destdir}", "PREFIX=/usr"],
                          capture_output=True, text=True, timeout=120)
    check(proc.returncode == 0, f"make install DESTDIR=... PREFIX=/usr: {proc.stderr[-400:]}")
    staged = os.path.join(destdir, "usr")
    ours = [f for f in installed_files(prefix)
            if f != "share/gradsync/presets/installed-only.yaml"]
    check(os.path.isdir(staged) and installed_files(staged) == ours,
          f"make install put under DESTDIR/usr the files cmake --install put under the prefix "
          f"({len(installed_files(staged)) if os.path.isdir(staged) else 0} vs {len(ours)})")
    version = subprocess.run([os.path.join(staged, "bin", "gradsync"), "--version"],
                             capture_output=True, text=True, timeout=60)
    check(version.returncode == 0, f"DESTDIR/usr/bin/gradsync --version: {version.stderr[-300:]}")
check.finish()
