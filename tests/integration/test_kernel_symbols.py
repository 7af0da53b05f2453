"""The instruction-set files of model/kernels/ export nothing the linker could share.

A weak symbol (an inline function or template instantiation: nm's W, V or u) in an object built
for AVX-512 or AVX2 is one the linker may pick for every file that instantiates it, the portable
path's included, which would then run instructions the CPU may lack. Each such file keeps its
helpers in an anonymous namespace and uses no template of another header
(model/kernels/CMakeLists.txt); this checks what the compiler made of them.
Usage: test_kernel_symbols.py BUILD_DIR
"""
import glob
import os
import subprocess
import sys

from checks import Checks

build = sys.argv[1]
check = Checks()
folder = os.path.join(build, "model", "kernels", "CMakeFiles", "gradsync_kernels.dir")
objects = [os.path.join(folder, f"{name}.cpp.o")
           for name in ("gemm_avx512", "gemm_avx2", "step_ops_avx512", "step_ops_avx2")]
present = [o for o in objects if os.path.isfile(o)]
if not present:
    # A build without the x86 kernels (another architecture, or a compiler other than GCC and
    # Clang) has none of these files: nothing to check, and said so.
    print("no x86 kernel objects in this build: skipped")
    sys.exit(77)
for obj in present:
    nm = subprocess.run(["nm", "-C", "--defined-only", obj], capture_output=True, text=True)
    weak = [line for line in nm.stdout.splitlines() if line.split(" ")[1:2] in (["W"], ["V"], ["u"])]
    check(nm.returncode == 0 and not weak,
          f"{os.path.basename(obj)}: no weak symbols ({'; '.join(weak[:4]) or 'none'})")
check.finish()
