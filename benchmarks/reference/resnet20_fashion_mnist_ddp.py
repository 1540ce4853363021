#!/usr/bin/env python3
"""PyTorch twin of libddp's README demo,

    mpirun -np 2 build/examples/train_resnet --data fashion-mnist --epochs 2

with the same recipe (examples/train_resnet/main.cpp, docs/examples.md):
resnet20 with 1 input channel, 10 classes and projection shortcuts; the
60,000 Fashion-MNIST training images with random crop 28 (zero padding 4),
horizontal flips and normalisation (mean 0.2860, std 0.3530); a shuffled
DistributedSampler; global batch 128 split over the ranks; SGD with Nesterov
momentum 0.9, peak lr 0.1, weight decay 5e-4 on weights of dimension >= 2
only; 0.2 epochs of linear warmup from 0, then a cosine to 0, stepped per
optimizer step; f32, NCHW (NHWC with --memory-format channels-last);
DistributedDataParallel with its default 25 MiB
buckets over gloo (nccl on GPUs).

Launch:
    python3 resnet20_fashion_mnist_ddp.py --nproc 2          # spawns 2 ranks
    torchrun --nproc_per_node 2 resnet20_fashion_mnist_ddp.py
    mpirun -np 2 python3 resnet20_fashion_mnist_ddp.py       # OMPI_COMM_WORLD_*
Rank 0 prints progress lines like train_resnet's and, as the last line on
stdout, a JSON object with train_resnet's keys (plus "torch")."""
import argparse
import datetime
import gzip
import json
import math
import os
import resource
import socket
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import resnet20  # noqa: E402

MEAN, STD = 0.2860, 0.3530  # of the Fashion-MNIST training pixels


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=1,
                   help="ranks to spawn on 127.0.0.1 when no launcher set RANK/WORLD_SIZE")
    p.add_argument("--port", type=int, default=0, help="MASTER_PORT for --nproc (0: a free one)")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--max-steps", type=int, default=0,
                   help="stop after this many steps (0: all); the schedule still spans --epochs")
    p.add_argument("--batch-size", type=int, default=128, help="GLOBAL batch")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--warmup-epochs", type=float, default=0.2)
    p.add_argument("--workers", type=int, default=1,
                   help="data-loader worker processes per rank (libddp: threads; default 1 both)")
    p.add_argument("--eval-limit", type=int, default=0, help="first N test images only (0: all)")
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="", choices=["", "gloo", "nccl"],
                   help="default: nccl on GPUs, else gloo")
    p.add_argument("--json", default="", help="also write the final JSON object to this file")
    p.add_argument("--memory-format", default="contiguous", choices=["contiguous", "channels-last"],
                   help="the model's and the images' layout (train_resnet's option of that name)")
    return p.parse_args(argv)


def read_idx(path):
    """An IDX file (raw or .gz) as a uint8 tensor of its dimensions."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not a uint8 IDX file")
    dims = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).view(*dims)


def find(root, name):
    for candidate in (os.path.join(root, name), os.path.join(root, name + ".gz")):
        if os.path.exists(candidate):
            return candidate
    raise FileNotFoundError(f"--data-dir: no {name}[.gz] in {root}")


class FashionMnist(Dataset):
    """Images as f32 [1, 28, 28] in [0, 1] (libddp's MnistDataset), then
    libddp's transform chain: RandomCrop(28, 4) with zero fill, a flip with
    probability 0.5, Normalize. Zero padding before normalising equals
    torchvision's ToTensor -> RandomCrop(28, padding=4) -> ... order."""

    def __init__(self, root, train):
        prefix = "train" if train else "t10k"
        self.images = read_idx(find(root, f"{prefix}-images-idx3-ubyte"))
        self.labels = read_idx(find(root, f"{prefix}-labels-idx1-ubyte")).long()
        self.train = train

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = self.images[i].unsqueeze(0).float().div_(255)
        if self.train:
            padded = F.pad(x, (4, 4, 4, 4))
            top, left = torch.randint(0, 9, (2,)).tolist()
            x = padded[:, top:top + 28, left:left + 28]
            if torch.rand(()) < 0.5:
                x = x.flip(-1)
        return (x - MEAN) / STD, self.labels[i]


def lr_factor(step, warmup, total):
    """WarmupCosineLR's closed form (src/optim/lr_scheduler.cpp) with
    start_factor 0 and min_lr 0, as a multiple of the peak lr."""
    if step < warmup:
        return step / warmup
    if step >= total:
        return 0.0
    return (1 + math.cos(math.pi * (step - warmup) / (total - warmup))) / 2


def format_duration(s):
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def peak_memory_mib(device):
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def allreduce_sum(values, device):
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.get_world_size() > 1:
        dist.all_reduce(t)
    return t.tolist()


def memory_format(args):
    return torch.channels_last if args.memory_format == "channels-last" else torch.contiguous_format


def evaluate(model, test, args, world, rank, local_batch, device):
    """Sharded like train_resnet's: rank r takes positions r, r + R, ... of
    the first n test images; the sampler's padding (positions >= n) is not
    counted, so each image counts once in the summed totals."""
    n = min(args.eval_limit, len(test)) if args.eval_limit > 0 else len(test)
    subset = torch.utils.data.Subset(test, range(n))
    sampler = DistributedSampler(subset, world, rank, shuffle=False)
    loader = DataLoader(subset, batch_size=local_batch * 2, sampler=sampler,
                        num_workers=args.workers, pin_memory=device.type == "cuda")
    model.eval()
    correct = loss_sum = counted = 0.0
    position = 0
    with torch.no_grad():
        for x, y in loader:
            rows = len(y)
            keep = sum(1 for j in range(rows) if rank + (position + j) * world < n)
            position += rows
            if keep == 0:
                continue
            x, y = x[:keep].to(device), y[:keep].to(device)
            logits = model(x.contiguous(memory_format=memory_format(args)))
            loss_sum += F.cross_entropy(logits.float(), y, reduction="sum").item()
            correct += (logits.argmax(1) == y).sum().item()
            counted += keep
    model.train()
    c, l, k = allreduce_sum([correct, loss_sum, counted], device)
    return c / max(1.0, k), l / max(1.0, k), int(k)


def train(args):
    total_start = time.perf_counter()  # train_resnet starts its total clock before joining
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    lead = rank == 0
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{local_rank % torch.cuda.device_count()}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    backend = args.backend or ("nccl" if cuda else "gloo")
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(minutes=10))
    # Note [Threads per rank] in examples/common/trainer_util.h: each CPU
    # rank gets cores / ranks-on-this-node threads unless OMP_NUM_THREADS is set.
    threads = int(os.environ.get("OMP_NUM_THREADS") or 0) or max(1, os.cpu_count() // local_world)
    if not cuda:
        torch.set_num_threads(threads)
    if args.batch_size % world != 0:
        if lead:
            print(f"--batch-size: the global batch {args.batch_size} is not divisible by world "
                  f"size {world}", file=sys.stderr)
        dist.destroy_process_group()
        return 2
    local_batch = args.batch_size // world
    torch.manual_seed(args.seed)

    train_set = FashionMnist(args.data_dir, True)
    test_set = FashionMnist(args.data_dir, False)
    fmt = memory_format(args)
    model = resnet20(1, 10).to(device, memory_format=fmt)
    if lead:
        print(f"resnet20_fashion_mnist_ddp (torch {torch.__version__}): {world} rank(s), "
              f"backend {backend}, device {device}"
              + ("" if cuda else f", {threads} thread(s) per rank"))
        print(f"parameters: {sum(p.numel() for p in model.parameters())}; global batch "
              f"{args.batch_size} ({local_batch} per rank); amp off", flush=True)
    ddp_model = DistributedDataParallel(model, device_ids=[device] if cuda else None)

    sampler = DistributedSampler(train_set, world, rank, shuffle=True, seed=args.seed)
    # drop_last=False and prefetch_factor 2 per worker, as libddp's loader.
    loader = DataLoader(train_set, batch_size=local_batch, sampler=sampler,
                        num_workers=args.workers, pin_memory=cuda)
    steps_per_epoch = len(loader)
    schedule_steps = steps_per_epoch * args.epochs
    stop_step = min(args.max_steps, schedule_steps) if args.max_steps > 0 else schedule_steps
    warmup = min(schedule_steps, round(args.warmup_epochs * steps_per_epoch))

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.SGD([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}],
                          lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay,
                          nesterov=args.momentum > 0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, warmup, schedule_steps))

    if lead:
        print(f"training {stop_step} steps ({steps_per_epoch} per epoch, {args.epochs} epochs, "
              f"warmup {warmup})", flush=True)
    step, train_s = 0, 0.0
    loss_acc, acc_steps = torch.zeros((), device=device), 0
    interval_start, interval_t = 0, time.perf_counter()
    result = None
    for epoch in range(args.epochs):
        if step >= stop_step:
            break
        sampler.set_epoch(epoch)
        # images_per_s as train_resnet measures it: per epoch, the clock runs
        # from before the loader starts (worker start-up and waiting for data
        # included) to after the last step; the first, slower step counts;
        # logging's loss allreduce counts; evaluation does not.
        epoch_start = time.perf_counter()
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            x = x.contiguous(memory_format=fmt)
            loss = F.cross_entropy(ddp_model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            loss_acc += loss.detach()
            acc_steps += 1
            last = step == stop_step or step % steps_per_epoch == 0
            if step % args.log_every == 0 or last:
                loss_sum, count = allreduce_sum([loss_acc.item(), acc_steps], device)
                loss_acc.zero_()
                acc_steps = 0
                now = time.perf_counter()
                rate = (step - interval_start) * args.batch_size / max(now - interval_t, 1e-9)
                interval_start, interval_t = step, now
                elapsed = train_s + now - epoch_start
                eta = elapsed / step * (stop_step - step)
                if lead:
                    print(f"epoch {epoch + 1}/{args.epochs}  step {step}/{stop_step}  "
                          f"loss {loss_sum / max(1.0, count):.4f}  "
                          f"lr {opt.param_groups[0]['lr']:.4g}  {rate:.0f} img/s  "
                          f"ETA {format_duration(eta)}", flush=True)
            if step >= stop_step:
                break
        train_s += time.perf_counter() - epoch_start
        if step % steps_per_epoch == 0:  # a whole epoch: report test accuracy
            eval_start = time.perf_counter()
            result = evaluate(model, test_set, args, world, rank, local_batch, device)
            interval_t += time.perf_counter() - eval_start  # as Stopwatch::exclude
            if lead:
                print(f"epoch {epoch + 1}: test accuracy {100 * result[0]:.2f}%  "
                      f"test loss {result[1]:.4f}  ({result[2]} images)", flush=True)
    if result is None or step % steps_per_epoch != 0:
        result = evaluate(model, test_set, args, world, rank, local_batch, device)

    # Counts whole global batches for the short last batch, as train_resnet does.
    images_per_s = step * args.batch_size / train_s if train_s > 0 else 0.0
    total_s = time.perf_counter() - total_start
    if lead:
        print(f"done: {step} steps, test accuracy {100 * result[0]:.2f}%, {images_per_s:.0f} "
              f"images/s, training {format_duration(train_s)}, total {format_duration(total_s)}")
        summary = {"model": "resnet20", "data": "fashion-mnist", "world_size": world,
                   "backend": backend, "device": str(device), "global_batch": args.batch_size,
                   "amp": "off", "memory_format": args.memory_format, "start_step": 0, "steps": step,
                   "epochs": step / steps_per_epoch, "test_accuracy": result[0],
                   "test_loss": result[1], "images_per_s": images_per_s, "train_s": train_s,
                   "total_s": total_s, "peak_memory_mib": peak_memory_mib(device),
                   "torch": torch.__version__}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(summary, f)
                f.write("\n")
        print(json.dumps(summary), flush=True)
    # Tear down together: a Gloo rank still connected to a peer that has
    # already destroyed its group was seen spinning at 100% instead of exiting.
    dist.barrier()
    dist.destroy_process_group()
    return 0


def spawned(index, args, port):
    os.environ.update(RANK=str(index), LOCAL_RANK=str(index), WORLD_SIZE=str(args.nproc),
                      LOCAL_WORLD_SIZE=str(args.nproc), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    code = train(args)
    if code:
        sys.exit(code)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    args = parse_args()
    env = os.environ
    if "OMPI_COMM_WORLD_RANK" in env and "RANK" not in env:  # mpirun: map Open MPI's names
        env["RANK"], env["WORLD_SIZE"] = env["OMPI_COMM_WORLD_RANK"], env["OMPI_COMM_WORLD_SIZE"]
        env.setdefault("LOCAL_RANK", env.get("OMPI_COMM_WORLD_LOCAL_RANK", env["RANK"]))
        env.setdefault("LOCAL_WORLD_SIZE", env.get("OMPI_COMM_WORLD_LOCAL_SIZE", env["WORLD_SIZE"]))
        env.setdefault("MASTER_ADDR", "127.0.0.1")  # one node unless told otherwise
        env.setdefault("MASTER_PORT", "29500")
    if "RANK" in env and "WORLD_SIZE" in env and "MASTER_ADDR" in env:
        return train(args)
    if args.nproc < 1 or args.batch_size % args.nproc != 0:
        print(f"--batch-size: the global batch {args.batch_size} is not divisible by --nproc "
              f"{args.nproc}", file=sys.stderr)
        return 2
    port = args.port or free_port()
    if args.nproc == 1:
        spawned(0, args, port)
        return 0
    try:
        mp.spawn(spawned, args=(args, port), nprocs=args.nproc)
    except mp.ProcessExitedException as e:  # a rank failed (or was killed); it has said why
        return e.exit_code if e.exit_code and e.exit_code > 0 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
