#!/usr/bin/python3
"""Writes tests/golden/powersgd.safetensors, the PyTorch reference of
tests/parallel/powersgd_golden_test.cpp: torch's own powerSGD_hook
(torch.distributed.algorithms.ddp_comm_hooks) on one bucket over 2 gloo
processes, for 5 iterations (start_powerSGD_iter = 2, so 2 plain and 3
compressed), matrix_approximation_rank 2, min_compression_rate 1, error feedback and warm start on.
Run with Debian's python3-torch:

    /usr/bin/python3 tests/golden/make_powersgd_golden.py

The random initial Q torch draws is drawn here again, so that libddp can start from
the same Q (PowerSGDState::set_q_memory). Tensors (f64):

  q_init              [sum of m*r]   torch's initial Q, flat in bucket order
  in.r<rank>.it<i>    [bucket numel] rank's bucket before the hook
  out.it<i>           [bucket numel] the bucket afterwards (the same on both)
"""
import os
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

from make_safetensors import write_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = [(8, 6), (8,), (3, 2), (5, 2, 3)]  # the C++ test spells these out again
WORLD, ITERS, START, RANK, MIN_RATE = 2, 5, 2, 2, 1.0
NUMEL = sum(torch.Size(s).numel() for s in SHAPES)


def bucket_input(rank, it):
    g = torch.Generator().manual_seed(1000 + 37 * rank + 7919 * it)
    return torch.randn(NUMEL, generator=g, dtype=torch.float64)


class Bucket:
    """What powerSGD_hook reads of a dist.GradBucket."""

    def __init__(self, buffer):
        self._buffer = buffer
        self._grads, pos = [], 0
        for s in SHAPES:
            n = torch.Size(s).numel()
            self._grads.append(buffer[pos:pos + n].view(s))
            pos += n

    def buffer(self): return self._buffer
    def index(self): return 0
    def is_last(self): return True
    def gradients(self): return self._grads


def initial_q():
    """The Q torch's hook draws at its first compressed iteration: it seeds
    torch with PowerSGDState's numpy RandomState(random_seed = 0) and draws
    each compressed matrix's m x r Q in turn (the C++ test fails if this
    is not what the hook used)."""
    seed = np.random.RandomState(0).randint(1_000_000_000)
    qs = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for s in SHAPES:
            n = s[0]
            m = torch.Size(s).numel() // n
            r = min(n, m, RANK)
            if psgd._should_compress(n, m, r, MIN_RATE)[0]:
                qs.append(torch.randn(1, m, r, dtype=torch.float64).reshape(-1))
    return torch.cat(qs)


def worker(rank, init_file, out):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=WORLD)
    state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=RANK,
                               start_powerSGD_iter=START, min_compression_rate=MIN_RATE,
                               use_error_feedback=True, warm_start=True)
    tensors = {}
    for it in range(ITERS):
        buffer = bucket_input(rank, it)
        result = psgd.powerSGD_hook(state, Bucket(buffer)).wait()
        tensors[f"out.it{it}"] = result.clone()
    if rank == 0:
        tensors["q_init"] = initial_q()
        for r in range(WORLD):
            for it in range(ITERS):
                tensors[f"in.r{r}.it{it}"] = bucket_input(r, it)
        ordered = {"q_init": tensors["q_init"]}
        ordered.update({k: v for k, v in sorted(tensors.items()) if k != "q_init"})
        write_safetensors(out, ordered)
    dist.barrier()  # rank 1 waits for the file, so no peer vanishes mid-write
    dist.destroy_process_group()


if __name__ == "__main__":
    out = os.path.join(HERE, "powersgd.safetensors")
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(worker, args=(os.path.join(d, "init"), out), nprocs=WORLD)
    print("wrote", out)
