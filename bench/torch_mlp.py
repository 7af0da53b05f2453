#!/usr/bin/python3
"""PyTorch peer for the gradsync MLP throughput benchmark.

Runs the same MLP training step (forward, cross-entropy, backward, SGD with
momentum) that a typical PyTorch training loop does, on a fixed in-memory pool
of random batches so that only compute is measured. With --device cuda the
model and the pool live on the GPU (PyTorch eager, FP32 matmuls: TF32 off, as
gradsync's cuBLAS calls; the line says tf32=off), and the clock is read after
torch.cuda.synchronize().
"""
import argparse
import ctypes
import json
import os
import re
import sys
import time

import torch
from torch import nn

POOL_BATCHES = 64


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", default="256,256", help="comma-separated hidden sizes")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--warmup-steps", type=int, default=50)
    p.add_argument("--input", type=int, default=784)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    return p.parse_args()


def build_model(n_in, hidden, n_out):
    layers, width = [], n_in
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, n_out))
    return nn.Sequential(*layers)


BLAS_NAMES = (("libmkl", "mkl"), ("openblas", "openblas"), ("blis", "blis"),
              ("atlas", "atlas"), ("libblas.so", "reference"))


class _DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]


def sgemm_provider():
    """Path of the library that libtorch_cpu's sgemm_ resolves to, or None.

    /proc/self/maps alone can mislead: with a mixed setup libopenblas is mapped
    (pulled in by LAPACK) while sgemm_ comes from the reference libblas.
    """
    try:
        lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
        addr = ctypes.cast(ctypes.CDLL(lib).sgemm_, ctypes.c_void_p)
        info = _DlInfo()
        if ctypes.CDLL(None).dladdr(addr, ctypes.byref(info)) and info.fname:
            return os.path.realpath(info.fname.decode())
    except (OSError, AttributeError):
        pass
    return None


def mapped_libs():
    try:
        with open("/proc/self/maps") as f:
            return " ".join(sorted({line.split()[-1] for line in f if ".so" in line}))
    except OSError:
        return ""


def detect_blas():
    """Name the BLAS torch's GEMMs run on.

    torch.__config__.show() on Debian only says BLAS_INFO=generic (the
    libblas.so.3 alternative), so ask the dynamic linker what it resolved to.
    """
    for source in (sgemm_provider() or "", mapped_libs()):
        for pattern, name in BLAS_NAMES:
            if pattern in source:
                return name
    m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    return m.group(1) if m else "unknown"


def disable_tf32():
    """Full-precision FP32 products, as gradsync's cuBLAS calls (CUBLAS_DEFAULT_MATH).

    set_float32_matmul_precision is the one spelling every torch since 1.12 accepts without a
    deprecation warning; torch 2.9 added per-backend fp32_precision and deprecated the
    allow_tf32 flags. The MLP runs no cuDNN op; its switch is set too so nothing can use TF32.
    """
    torch.set_float32_matmul_precision("highest")
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):
        conv.fp32_precision = "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = False
    if torch.get_float32_matmul_precision() != "highest":
        sys.exit("torch_mlp.py: could not turn TF32 off for matmuls")


def make_pool(args, device):
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(POOL_BATCHES, args.batch, args.input, generator=g)
    ys = torch.randint(0, args.classes, (POOL_BATCHES, args.batch), generator=g)
    return xs.to(device), ys.to(device)


def synchronize(device):
    """Wait for queued GPU work, so the clock measures work done, not work issued."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_step(model, loss_fn, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()


def run(args, device):
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    hidden = [int(h) for h in args.hidden.split(",") if h]
    model = build_model(args.input, hidden, args.classes).to(device)
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    xs, ys = make_pool(args, device)

    for i in range(args.warmup_steps):
        j = i % POOL_BATCHES
        train_step(model, loss_fn, opt, xs[j], ys[j])

    synchronize(device)
    steps, start = 0, time.perf_counter()
    elapsed = 0.0
    while elapsed < args.seconds:
        j = steps % POOL_BATCHES
        train_step(model, loss_fn, opt, xs[j], ys[j])
        steps += 1
        # On a GPU the queue runs ahead of the host; sync only every 16 steps (as gradsync
        # reads its clock), so the sync itself is not what is measured.
        if device.type != "cuda" or steps % 16 == 0:
            synchronize(device)
            elapsed = time.perf_counter() - start
    synchronize(device)
    elapsed = time.perf_counter() - start
    return steps, elapsed


def main():
    args = parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit("torch_mlp.py: --device cuda but torch sees no CUDA device "
                     "(a CPU-only torch build, or no GPU)")
        disable_tf32()
        blas = "cublas:" + torch.cuda.get_device_name(device).replace(" ", "_")
    else:
        blas = detect_blas()
    if blas == "reference":
        print("warning: torch is using the reference BLAS (libblas); numbers will be "
              "~10x (or more) too slow. `scripts/install-deps.sh --bench` installs OpenBLAS.",
              file=sys.stderr)
    steps, elapsed = run(args, device)
    result = {"samples_per_s": steps * args.batch / elapsed, "steps": steps,
              "seconds": elapsed, "batch": args.batch, "threads": args.threads,
              "blas": blas, "torch": torch.__version__}
    if device.type == "cuda":
        result["tf32"] = "off"  # disable_tf32() exits otherwise
    if args.json:
        print(json.dumps(result))
    else:
        extra = " tf32={tf32}".format(**result) if "tf32" in result else ""
        print("torch: samples/s={samples_per_s:.1f} steps={steps} seconds={seconds:.3f} "
              "batch={batch} threads={threads} torch={torch} blas={blas}".format(**result)
              + extra)


if __name__ == "__main__":
    main()
