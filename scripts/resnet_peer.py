#!/usr/bin/python3
"""PyTorch peer of gradsync's ResNet step (model/resnet/): samples/s of forward + backward.

The same network as gradsync's `model.kind: resnet`: conv3x3(16)-BN-ReLU, three stages of
`--blocks` torchvision BasicBlocks at width w, 2w, 4w (stride 2 at the first block of stages 2
and 3, shortcut 1x1 conv stride 2 + BN), global average pool, linear to 10 classes, softmax
cross-entropy; convolutions without bias, as torchvision's. Training mode (batch statistics).

One step is what gradsync's ResNet::forward_backward does: forward, the mean loss, backward into
the parameters' .grad (set to None first, so backward writes rather than adds). Batches come
from a fixed pool of random inputs, so only compute is measured. Prints one line:

  resnet-peer torch=1.13.0a0 threads=1 batch=64 blocks=1 width=16 params=77754 channels_last=0
    samples/s=811.6 cpu_samples/s=815.0

Run with Debian's PyTorch: /usr/bin/python3 scripts/resnet_peer.py --batch 64; its gradsync
side: build/bin/gradsync_micro_bench --benchmark_filter=ResNet (bench/micro/resnet_step.cpp).
--channels-last runs the same network on NHWC tensors (memory_format=torch.channels_last), the
layout gradsync's ResNet computes in, where oneDNN's convolutions run faster than on NCHW.
"""
import argparse
import time

import torch
from torch import nn
import torch.nn.functional as F

POOL_BATCHES = 16


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        shortcut = x if self.downsample is None else self.downsample(x)
        return F.relu(out + shortcut)


class ResNet(nn.Module):
    def __init__(self, blocks, width, channels=1, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        layers, cin = [], width
        for stage in range(3):
            cout = width << stage
            for b in range(blocks):
                stride = 2 if stage > 0 and b == 0 else 1
                layers.append(BasicBlock(cin, cout, stride))
                cin = cout
        self.blocks = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.blocks(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--blocks", type=int, default=1, help="basic blocks per stage")
    p.add_argument("--width", type=int, default=16, help="channels of the first stage")
    p.add_argument("--size", type=int, default=28, help="input height and width")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--channels-last", action="store_true", help="NHWC tensors (memory format)")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = ResNet(args.blocks, args.width)
    model.train()
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    pool = [torch.randn(args.batch, 1, args.size, args.size).to(memory_format=fmt)
            for _ in range(POOL_BATCHES)]
    labels = [torch.randint(0, 10, (args.batch,)) for _ in range(POOL_BATCHES)]

    def step(i):
        for q in model.parameters():
            q.grad = None
        loss = F.cross_entropy(model(pool[i % POOL_BATCHES]), labels[i % POOL_BATCHES])
        loss.backward()

    for i in range(args.warmup_steps):
        step(i)
    steps, start, cpu_start = 0, time.perf_counter(), time.process_time()
    while True:
        step(steps)
        steps += 1
        elapsed = time.perf_counter() - start
        if elapsed >= args.seconds:
            break
    cpu = time.process_time() - cpu_start
    params = sum(q.numel() for q in model.parameters())
    # samples/s by the wall clock; cpu_samples/s by the process's CPU time, which is what
    # Google Benchmark's items_per_second uses (gradsync_micro_bench), and which a machine
    # shared with other work disturbs less. With one thread the two agree on an idle machine.
    print(f"resnet-peer torch={torch.__version__} threads={args.threads} batch={args.batch} "
          f"blocks={args.blocks} width={args.width} params={params} "
          f"channels_last={int(args.channels_last)} samples/s={steps * args.batch / elapsed:.1f} "
          f"cpu_samples/s={steps * args.batch / cpu:.1f}")


if __name__ == "__main__":
    main()
