#!/usr/bin/python3
"""Writes tests/golden/lr_scheduler.safetensors, the learning-rate sequences
of torch.optim.lr_scheduler that tests/optim/lr_scheduler_test.cpp compares
ddp::optim's schedulers against. Run from anywhere with Debian's
python3-torch:

    /usr/bin/python3 tests/golden/make_lr_scheduler_golden.py

Each case builds torch.optim.SGD over two parameter groups (base lrs in
BASE_LRS), attaches a scheduler and records every group's lr right after
construction (step 0) and after each of STEPS calls of scheduler.step():

  <case>.lr   F64 [STEPS + 1, 2]   row s: the lrs in effect for step s

Cases (the C++ test builds the same schedules from the same numbers):
  step_lr            StepLR(step_size=7, gamma=0.3)
  one_cycle          OneCycleLR(max_lr=[0.5, 0.2], total_steps=50), defaults
  one_cycle_3phase   OneCycleLR(max_lr=0.4, total_steps=50, pct_start=0.25,
                     div_factor=10, final_div_factor=100, three_phase=True)
  one_cycle_linear   OneCycleLR(max_lr=[0.3, 0.1], total_steps=50,
                     pct_start=0.4, anneal_strategy='linear')
  warmup_cosine      SequentialLR([LinearLR(start_factor=0.01, total_iters=10),
                     CosineAnnealingLR(T_max=40, eta_min=1e-4)], milestones=[10]):
                     torch's own (recursive) formulas, independent of ours
  warmup_cosine_zero LambdaLR with warmup from 0 and cosine to 0 over 50 steps
                     (LinearLR refuses start_factor 0, so this one spells the
                     closed form out; it checks step counting and the edges)

OneCycleLR runs with cycle_momentum=False: ddp's OneCycleLR does not cycle
momentum. The writer is make_safetensors.py's.
"""
import math
import os

import torch
from torch.optim import lr_scheduler as sched

from make_safetensors import write_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 50
BASE_LRS = [0.1, 0.03]


def optimizer():
    groups = [dict(params=[torch.zeros(2, requires_grad=True)], lr=lr) for lr in BASE_LRS]
    return torch.optim.SGD(groups, lr=BASE_LRS[0], momentum=0.9)


def zero_warmup_cosine(step, warmup=5, total=50):
    # Multiplier of the base lr: linear from 0 to 1 over `warmup` steps, then a
    # half cosine to 0 at `total`.
    if step < warmup:
        return step / warmup
    progress = min(step, total) - warmup
    return 0.5 * (1.0 + math.cos(math.pi * progress / (total - warmup)))


def make(name, opt):
    if name == "step_lr":
        return sched.StepLR(opt, step_size=7, gamma=0.3)
    if name == "one_cycle":
        return sched.OneCycleLR(opt, max_lr=[0.5, 0.2], total_steps=STEPS, cycle_momentum=False)
    if name == "one_cycle_3phase":
        return sched.OneCycleLR(opt, max_lr=0.4, total_steps=STEPS, pct_start=0.25,
                                div_factor=10.0, final_div_factor=100.0, three_phase=True,
                                cycle_momentum=False)
    if name == "one_cycle_linear":
        return sched.OneCycleLR(opt, max_lr=[0.3, 0.1], total_steps=STEPS, pct_start=0.4,
                                anneal_strategy="linear", cycle_momentum=False)
    if name == "warmup_cosine":
        warm = sched.LinearLR(opt, start_factor=0.01, end_factor=1.0, total_iters=10)
        cos = sched.CosineAnnealingLR(opt, T_max=STEPS - 10, eta_min=1e-4)
        return sched.SequentialLR(opt, [warm, cos], milestones=[10])
    if name == "warmup_cosine_zero":
        return sched.LambdaLR(opt, zero_warmup_cosine)
    raise ValueError(name)


CASES = ["step_lr", "one_cycle", "one_cycle_3phase", "one_cycle_linear", "warmup_cosine",
         "warmup_cosine_zero"]


def run(name):
    opt = optimizer()
    s = make(name, opt)
    rows = [[g["lr"] for g in opt.param_groups]]
    for _ in range(STEPS):
        opt.step()  # keeps torch from warning about the call order
        s.step()
        rows.append([g["lr"] for g in opt.param_groups])
    return torch.tensor(rows, dtype=torch.float64)


def main():
    out = {"%s.lr" % name: run(name) for name in CASES}
    write_safetensors(os.path.join(HERE, "lr_scheduler.safetensors"), out,
                      {"producer": "tests/golden/make_lr_scheduler_golden.py",
                       "torch": torch.__version__})


if __name__ == "__main__":
    main()
