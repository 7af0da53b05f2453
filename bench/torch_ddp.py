#!/usr/bin/python3
"""PyTorch DDP peer for gradsync's `allreduce` and `zero` training on CPUs (backend gloo).

One process per rank, started by torchrun (scripts/bench-ddp-vs-gradsync.sh does):

  /usr/bin/python3 -m torch.distributed.run --nproc_per_node N -r 1 -t 2 --log_dir DIR \
      bench/torch_ddp.py --batch 64 --steps 2000 [--hook none|fp16|powersgd] \
      [--optimizer sgd|zero] [--hidden 256,256]

(-r 1 -t 2: torchrun's default stream handling crashes under Python 3.11; rank 0's line then
lands in DIR/*/attempt_0/0/stdout.log.) Each rank trains torch_mlp.py's model, loss and SGD
with momentum on its own in-memory pool of random batches, so only compute and communication
are measured, on one intra-op thread (gradsync's ranks compute on one thread each).

The split, as gradsync's summary.json gives it: compute_s is the mean time of a step run
under `ddp.no_sync()` (forward, backward, SGD step, no reduction), averaged over the ranks;
communicate_s is the synchronised step's time less that. The timed window alternates blocks
of synchronised and no_sync steps, so that drift in the machine's speed hits both alike;
every block starts at a barrier (untimed), so a block's time is never another block's skew
between ranks. samples/s counts the synchronised steps alone, on rank 0's clock (as gradsync's).

--hook registers one of DDP's communication hooks, the peers of gradsync's comm.compression:
fp16 is default_hooks.fp16_compress_hook (divide by N, all-reduce 16-bit, decode); powersgd is
powerSGD_hook with PowerSGDState(matrix_approximation_rank=--powersgd-rank, start_powerSGD_iter=
--start-iter, use_error_feedback=True, warm_start=True), its other settings PyTorch's defaults.
The hook runs on synchronised steps only (no_sync skips the reduction and so the hook), so it
is part of communicate_s; PowerSGD's iteration count advances on synchronised steps alone, and
the warm-up steps count: with --start-iter <= --warmup-steps every timed step is compressed.

--optimizer zero, the peer of gradsync's `strategy: zero` with zero.stage 1, wraps the optimizer
in torch.distributed.optim.ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.SGD, lr,
momentum): each rank keeps the momentum of its shard of the parameters (PyTorch assigns whole
tensors to ranks, balanced by size), updates that shard alone and broadcasts it to the others.
DDP still all-reduces the whole gradient first, so a step moves one all-reduce plus the
broadcasts (gradsync's stage 1: a reduce-scatter and an all-gather, one all-reduce's bytes).
The no_sync steps that time compute run the local shard's update alone (ZeroRedundancyOptimizer
._local_step, no broadcast): forward, backward and 1/N of the SGD step, as gradsync's compute
under zero; the broadcasts are then part of communicate_s.
"""
import argparse
import contextlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

from torch_mlp import POOL_BATCHES, build_model, detect_blas, make_pool, train_step

BLOCK_STEPS = 20


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", default="256,256", help="comma-separated hidden sizes")
    p.add_argument("--batch", type=int, default=64, help="per rank")
    p.add_argument("--steps", type=int, default=2000, help="timed synchronised steps "
                   "(as many no_sync steps run between them)")
    p.add_argument("--warmup-steps", type=int, default=50)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    # backends.yaml's comm.bucket_mb: with 1 MiB the 1.03 MiB model is one bucket on both sides.
    p.add_argument("--bucket-mb", type=float, default=1.0, help="DDP's bucket_cap_mb")
    p.add_argument("--bucket-view", action="store_true",
                   help="gradient_as_bucket_view=True (DDP's default is off: a copy each way)")
    p.add_argument("--hook", choices=("none", "fp16", "powersgd"), default="none",
                   help="DDP communication hook: fp16_compress_hook or powerSGD_hook")
    p.add_argument("--optimizer", choices=("sgd", "zero"), default="sgd",
                   help="torch.optim.SGD, or SGD inside ZeroRedundancyOptimizer (ZeRO stage 1)")
    p.add_argument("--powersgd-rank", type=int, default=4, help="matrix_approximation_rank")
    # PowerSGDState refuses start_powerSGD_iter < 2 with error feedback or warm start on.
    p.add_argument("--start-iter", type=int, default=10,
                   help="powersgd: start_powerSGD_iter, synchronised steps run uncompressed first")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--input", type=int, default=784)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    hidden = [int(h) for h in args.hidden.split(",") if h]
    ddp = DistributedDataParallel(build_model(args.input, hidden, args.classes),
                                  bucket_cap_mb=args.bucket_mb,
                                  gradient_as_bucket_view=args.bucket_view)
    hook_state = register_hook(ddp, args)
    loss_fn = nn.CrossEntropyLoss()
    if args.optimizer == "zero":
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.SGD,
                                      lr=args.lr, momentum=args.momentum)
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum)
    # Without synchronisation ZeRO's step is its shard's update alone (no broadcast).
    local_opt = LocalStep(opt) if args.optimizer == "zero" else opt
    xs, ys = make_pool(args, torch.device("cpu"))
    step = 0

    def block(steps, sync):
        """Time `steps` steps from a common start; with sync False, under no_sync()."""
        nonlocal step
        dist.barrier()
        start = time.perf_counter()
        with contextlib.nullcontext() if sync else ddp.no_sync():
            for _ in range(steps):
                j = step % POOL_BATCHES
                train_step(ddp, loss_fn, opt if sync else local_opt, xs[j], ys[j])
                step += 1
        return time.perf_counter() - start

    # Both kinds of step warmed up; the first synchronised steps also rebuild DDP's buckets.
    block(args.warmup_steps, True)
    block(args.warmup_steps, False)
    synced = local = 0.0
    for done in range(0, args.steps, BLOCK_STEPS):
        n = min(BLOCK_STEPS, args.steps - done)
        synced += block(n, True)
        local += block(n, False)
    # Compute is averaged over the ranks (as gradsync's mean_step_s); the clock is rank 0's.
    local_sum = torch.tensor([local], dtype=torch.float64)
    dist.all_reduce(local_sum)
    # After the first iterations DDP regroups its buckets in the order gradients arrived.
    logged = ddp._get_ddp_logging_data()
    buckets = logged.get("rebuilt_bucket_sizes") or logged.get("bucket_sizes", "")
    dist.destroy_process_group()
    if rank == 0:
        report(args, synced, local_sum.item() / world / args.steps, world, buckets, hook_state)
    # Leave without Python's finalisation: with torch 1.13 on Python 3.11 the DDP reducer's
    # destructor joins Gloo's worker thread while holding the GIL, and that thread waits for the
    # GIL to free a tensor, so the process never exits (seen under torchrun, after the last line).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class LocalStep:
    """A ZeroRedundancyOptimizer whose step updates this rank's shard and broadcasts nothing."""

    def __init__(self, zero):
        self.zero = zero

    def zero_grad(self, set_to_none=False):
        self.zero.zero_grad(set_to_none=set_to_none)

    def step(self):
        self.zero._local_step()


def register_hook(ddp, args):
    """Registers --hook on `ddp`; none leaves DDP's built-in all-reduce (no Python hook)."""
    if args.hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif args.hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None,
                                            matrix_approximation_rank=args.powersgd_rank,
                                            start_powerSGD_iter=args.start_iter,
                                            use_error_feedback=True, warm_start=True)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return state
    return None


def report(args, synced, compute_s, world, buckets, hook_state):
    step_s = synced / args.steps
    result = {"samples_per_s": world * args.batch * args.steps / synced, "steps": args.steps,
              "step_s": step_s, "compute_s": compute_s, "communicate_s": step_s - compute_s,
              "ranks": world, "batch": args.batch, "bucket_mb": args.bucket_mb,
              "buckets": len(buckets.split(",")) if buckets else 0,
              "bucket_view": args.bucket_view, "threads": args.threads, "backend": "gloo",
              "hook": args.hook, "optimizer": args.optimizer,
              "hidden": args.hidden, "torch": torch.__version__, "blas": detect_blas()}
    if args.hook == "powersgd":
        # Elements before / after compression over the compressed steps: 0 if none ran.
        result.update(powersgd_rank=args.powersgd_rank, start_iter=args.start_iter,
                      powersgd_compress_rate=hook_state.compression_stats()[0])
    if args.json:
        print(json.dumps(result))
    else:
        print("ddp: samples/s={samples_per_s:.1f} steps={steps} step_s={step_s:.6f} "
              "compute_s={compute_s:.6f} communicate_s={communicate_s:.6f} ranks={ranks} "
              "batch={batch} bucket_mb={bucket_mb:g} buckets={buckets} threads={threads} "
              "backend={backend} hook={hook} optimizer={optimizer} hidden={hidden} torch={torch} blas={blas}".format(**result))


if __name__ == "__main__":
    main()
