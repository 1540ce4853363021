"""One rank of the PyTorch twin of scaling_main (benchmarks/scaling/run.sh):
the same ResNet-18 (libddp's shapes, built here: torchvision may be absent),
the same synthetic batch size and image side, the same SGD step, under
torch.nn.parallel.DistributedDataParallel over gloo with its defaults
(25 MiB buckets). Rank, world size and the master's address come from the
environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as torchrun sets
them. Modes: ddp, no_comm (every step inside no_sync()); any other mode
exits 3 (run.sh: a skipped row)."""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from torch_models import BasicBlock, init_resnet_  # noqa: E402

MODE_UNAVAILABLE = 3


class ResNet18(nn.Module):
    """libddp's resnet18: 7x7/2 stem, 3x3/2 max pool, four stages of two basic
    blocks (64/128/256/512 planes), 1000 classes."""

    def __init__(self, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = 64
        for s, planes in enumerate([64, 128, 256, 512]):
            blocks = []
            for b in range(2):
                blocks.append(BasicBlock(cin, planes, 2 if (s > 0 and b == 0) else 1))
                cin = planes
            setattr(self, f"layer{s + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        y = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        y = self.layer4(self.layer3(self.layer2(self.layer1(y))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mode", default="ddp")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--json", default="")
    a = p.parse_args()
    if a.mode not in ("ddp", "no_comm"):
        print(f"torch_twin: mode {a.mode} is not available in this twin", file=sys.stderr)
        return MODE_UNAVAILABLE
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234)
    model = init_resnet_(ResNet18())
    ddp_model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(99 + rank)
    x = torch.randn(a.batch_size, 3, a.image_size, a.image_size, generator=g)
    y = torch.randint(0, 1000, (a.batch_size,), generator=g)

    def run_step():
        F.cross_entropy(ddp_model(x), y).backward()
        opt.step()
        opt.zero_grad()

    def step():
        if a.mode == "no_comm":
            with ddp_model.no_sync():
                run_step()
        else:
            run_step()

    for _ in range(a.warmup):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(a.steps):
        step()
    t = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    seconds = t.item()
    images_per_s = a.batch_size * a.steps * world / seconds
    if rank == 0:
        print(f"torch_twin: {world} ranks, mode {a.mode}: {seconds / a.steps:.4f} s/step, "
              f"{images_per_s:.1f} images/s")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"nodes": world, "engine": "pytorch", "mode": a.mode,
                           "model": "resnet18", "batch_size": a.batch_size,
                           "image_size": a.image_size, "bucket_cap_mb": a.bucket_cap_mb,
                           "steps": a.steps, "step_s": seconds / a.steps,
                           "images_per_s": images_per_s}, f)
    # Leave without destroy_process_group(): with torch 1.13's gloo a rank
    # that tears down while a peer is already gone was seen spinning in the
    # kernel for minutes (N = 4). The barrier makes sure every rank has its
    # result first.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
