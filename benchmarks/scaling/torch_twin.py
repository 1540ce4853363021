"""One rank of the PyTorch twin of scaling_main (benchmarks/scaling/run.sh):
the same ResNet-18 (libddp's shapes, built here: torchvision may be absent),
the same synthetic batch size and image side, the same SGD step, under
torch.nn.parallel.DistributedDataParallel over gloo with its defaults
(25 MiB buckets). Rank, world size and the master's address come from the
environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as torchrun sets
them. Modes: ddp, no_comm (every step inside no_sync()), fp16 (DDP with
default_hooks.fp16_compress_hook); bf16 (gloo has no bf16 allreduce) and any other mode
exits 3 (run.sh: a skipped row).

--compute emulated --profile FILE: the GPU-regime twin of scaling_main's
(docs/benchmarks.md, "GPU-regime twin"; emulated_layer.h): one
torch.autograd.Function per profile layer, in the real model's order, with
the real parameters' names and shapes; forward and backward sleep the
profile's seconds x --stretch, backward returns for each parameter a
gradient of its shape filled with (rank + 1) / 1024 (made once), and the
optimizer step is a sleep. The last step's gradients are checked against
the mean over the ranks (exit 1 when wrong)."""
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


class _Layer(torch.autograd.Function):
    """One emulated layer (Note [Emulated gradients] in emulated_layer.h)."""

    @staticmethod
    def forward(ctx, layer, x, *params):
        start = time.perf_counter()
        ctx.layer = layer
        y = torch.zeros(1)
        _sleep_until(start + layer.forward_s)
        return y

    @staticmethod
    def backward(ctx, g):
        start = time.perf_counter()
        layer = ctx.layer
        grads = (g if ctx.needs_input_grad[1] else None,) + tuple(layer.grads)
        _sleep_until(start + layer.backward_s)
        return (None,) + grads


def _sleep_until(deadline):
    left = deadline - time.perf_counter()
    if left > 0:
        time.sleep(left)


class EmulatedLayer(nn.Module):
    def __init__(self, spec, stretch, grad_value):
        super().__init__()
        self.forward_s = spec["forward_s"] * stretch
        self.backward_s = spec["backward_s"] * stretch
        for name, shape in spec["params"]:
            self.register_parameter(name, nn.Parameter(torch.zeros(shape)))
        for name, shape, *dtype in spec.get("buffers") or []:
            dt = torch.int64 if dtype and dtype[0] == "i64" else torch.float32
            self.register_buffer(name, torch.zeros(shape, dtype=dt))
        self.grad_value = grad_value
        self.inputs = list(self.parameters(recurse=False))
        self.grads = []

    def use(self, p):
        self.inputs.append(p)

    def make_gradients(self):
        self.grads = [torch.full(p.shape, self.grad_value) for p in self.inputs]

    def forward(self, x):
        return _Layer.apply(self, x, *self.inputs)


class EmulatedModel(nn.Module):
    """The profile's layers as a chain, under containers named like the real
    model's modules, so the parameters keep its names and order."""

    def __init__(self, profile, stretch, rank):
        super().__init__()
        self.chain = []
        for spec in profile["layers"]:
            *prefix, leaf = spec["name"].split(".")
            parent = self
            for part in prefix:
                if not hasattr(parent, part):
                    parent.add_module(part, nn.Module())
                parent = getattr(parent, part)
            layer = EmulatedLayer(spec, stretch, grad_value(rank))
            parent.add_module(leaf, layer)
            for name in spec.get("uses") or []:
                layer.use(self.get_parameter(name))
            layer.make_gradients()
            self.chain.append(layer)

    def forward(self, x):
        for layer in self.chain:
            x = layer(x)
        return x

    def check_gradients(self, per_use):
        uses = {}
        for layer in self.chain:
            for p in layer.inputs:
                uses[id(p)] = uses.get(id(p), 0) + 1
        bad = []
        for name, p in self.named_parameters():
            want = per_use * uses[id(p)]
            if p.grad is None:
                bad.append(f"{name}: no gradient")
                continue
            flat = p.grad.reshape(-1)
            for got in (flat[0].item(), flat[-1].item()):
                if abs(got - want) > 1e-6 * abs(want):
                    bad.append(f"{name}: gradient {got} where {want} was expected")
                    break
        return bad


def grad_value(rank):
    return (rank + 1) / 1024.0


def load_profile(path):
    """The profile as scaling_main reads it; exits 2 naming --profile when it
    cannot be read or lacks what the twin needs."""
    try:
        with open(path) as f:
            prof = json.load(f)
        for k in ("name", "sample", "samples_per_step", "step_s", "optimizer_s", "layers"):
            if k not in prof:
                raise ValueError(f"no key \"{k}\"")
        for spec in prof["layers"]:
            for k in ("name", "params", "forward_s", "backward_s"):
                if k not in spec:
                    raise ValueError(f"a layer without \"{k}\"")
    except (OSError, ValueError, TypeError) as e:
        print(f"torch_twin: --profile: profile {path}: {e}", file=sys.stderr)
        sys.exit(2)
    return prof


def max_over_ranks(values):
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def time_steps(a, ddp_model, run_step):
    """--warmup untimed and --steps timed steps (inside no_sync for mode
    no_comm); the whole time and each step's, the slowest rank's."""
    def step():
        if a.mode == "no_comm":
            with ddp_model.no_sync():
                run_step()
        else:
            run_step()

    for _ in range(a.warmup):
        step()
    dist.barrier()
    each = []
    start = time.perf_counter()
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        each.append(time.perf_counter() - t0)
    total = max_over_ranks([time.perf_counter() - start])[0]
    return total, max_over_ranks(each)


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def register_hook(a, ddp_model):
    """Mode fp16: PyTorch's fp16_compress_hook (each bucket divided by the
    world size, cast to f16, allreduced, cast back). Mode bf16: torch 1.13's
    gloo has no bf16 allreduce ("Invalid scalar type"), so it exits 3."""
    if a.mode == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp_model.register_comm_hook(None, default_hooks.fp16_compress_hook)


def run_emulated(a):
    if a.stretch <= 0:
        print("torch_twin: --stretch must be positive", file=sys.stderr)
        return 2
    prof = load_profile(a.profile)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = EmulatedModel(prof, a.stretch, rank)
    ddp_model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_cap_mb)
    register_hook(a, ddp_model)
    x = torch.zeros(1)
    optimizer_s = prof["optimizer_s"] * a.stretch

    def run_step():
        model.zero_grad(set_to_none=False)  # torch 1.13 optimizer's default
        ddp_model(x).backward()
        time.sleep(optimizer_s)  # the optimizer step, on the GPU

    total, each = time_steps(a, ddp_model, run_step)
    per_use = (world + 1) / 2048.0 if a.mode != "no_comm" else grad_value(rank)
    bad = model.check_gradients(per_use)
    bad_all = max_over_ranks([float(len(bad))])[0]
    cluster_s = total / a.stretch
    rate = prof["samples_per_step"] * a.steps * world / cluster_s
    step_s = median(each) / a.stretch
    n_params = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(f"torch_twin: {world} ranks, emulated {prof['name']} (stretch {a.stretch:g}), "
              f"mode {a.mode}: {step_s:.4f} s/step cluster time ({step_s * a.stretch:.4f} s "
              f"wall), {rate:.1f} {prof['sample']}/s; gradients "
              f"{'ok' if bad_all == 0 else 'WRONG'}")
        if a.json:
            row = {"nodes": world, "engine": "pytorch", "mode": a.mode, "compute": "emulated",
                   "profile": prof["name"], "stretch": a.stretch}
            if a.cluster_link_gbit:
                row["cluster_link_gbit"] = a.cluster_link_gbit
            if a.link_gbit:
                row["link_gbit"] = a.link_gbit
            row.update({"sample": prof["sample"], "samples_per_step": prof["samples_per_step"],
                        "profile_step_s": prof["step_s"], "bucket_cap_mb": a.bucket_cap_mb,
                        "steps": a.steps, "step_s": cluster_s / a.steps,
                        "median_step_s": step_s, "wall_step_s": step_s * a.stretch,
                        "images_per_s": rate, "grad_elements": n_params,
                        "grad_check": "ok" if bad_all == 0 else "wrong"})
            with open(a.json, "w") as f:
                json.dump(row, f)
    if bad:
        print(f"torch_twin: rank {rank}: {len(bad)} parameters with a wrong gradient, first "
              f"{bad[0]}", file=sys.stderr)
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if bad_all else 0)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mode", default="ddp")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--json", default="")
    p.add_argument("--compute", default="real", choices=["real", "emulated"])
    p.add_argument("--profile", default="")
    p.add_argument("--stretch", type=float, default=1.0)
    p.add_argument("--cluster-link-gbit", type=float, default=0.0)
    p.add_argument("--link-gbit", type=float, default=0.0)
    a = p.parse_args()
    if a.mode == "bf16":
        print("torch_twin: mode bf16 is not available: torch 1.13's gloo has no bf16 allreduce "
              "(and register_comm_hook refuses bf16_compress_hook without NCCL)", file=sys.stderr)
        return MODE_UNAVAILABLE
    if a.mode not in ("ddp", "no_comm", "fp16"):
        print(f"torch_twin: mode {a.mode} is not available in this twin", file=sys.stderr)
        return MODE_UNAVAILABLE
    if a.compute == "emulated":
        return run_emulated(a)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234)
    model = init_resnet_(ResNet18())
    ddp_model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_cap_mb)
    register_hook(a, ddp_model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(99 + rank)
    x = torch.randn(a.batch_size, 3, a.image_size, a.image_size, generator=g)
    y = torch.randint(0, 1000, (a.batch_size,), generator=g)

    def run_step():
        F.cross_entropy(ddp_model(x), y).backward()
        opt.step()
        opt.zero_grad()

    seconds, each = time_steps(a, ddp_model, run_step)
    images_per_s = a.batch_size * a.steps * world / seconds
    if rank == 0:
        print(f"torch_twin: {world} ranks, mode {a.mode}: {seconds / a.steps:.4f} s/step, "
              f"{images_per_s:.1f} images/s")
        if a.json:
            with open(a.json, "w") as f:
                row = {"nodes": world, "engine": "pytorch", "mode": a.mode, "compute": "real",
                       "profile": "resnet18", "stretch": 1.0}
                if a.cluster_link_gbit:
                    row["cluster_link_gbit"] = a.cluster_link_gbit
                if a.link_gbit:
                    row["link_gbit"] = a.link_gbit
                row.update({"model": "resnet18", "batch_size": a.batch_size,
                            "image_size": a.image_size, "bucket_cap_mb": a.bucket_cap_mb,
                            "steps": a.steps, "step_s": seconds / a.steps,
                            "median_step_s": median(each), "images_per_s": images_per_s,
                            "grad_elements": sum(q.numel() for q in model.parameters())})
                json.dump(row, f)
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
