#!/usr/bin/python3
"""Writes tests/golden/optim.safetensors, the reference trajectories that
tests/optim replays. Run from anywhere with Debian's python3-torch:

    /usr/bin/python3 tests/golden/make_optim_golden.py

For each case (an optimizer and its options, see CASES) and each dtype
(f32, f64), three small parameters take 5 steps with fixed gradients that
are set on .grad directly, so no model or loss is involved. Some steps leave
a parameter's .grad as None, which torch skips; the tests must skip it too.
Tensors, with <c> the case, <d> f32 or f64 and <k> the parameter index:

  <c>.<d>.p<k>.params    [6, *shape]  the parameter before step 1 and after
                                      each of steps 1..5
  <c>.<d>.p<k>.grads     [5, *shape]  the gradient set before each step
  <c>.p<k>.has_grad      U8 [5]       0 where the step leaves .grad = None

The writer is make_safetensors.py's (struct + json, no code shared with
libddp's loader).
"""
import os

import torch

from make_safetensors import write_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 5
SHAPES = [(3, 4), (4,), (2, 1, 3)]

# name -> (class, groups as [(param indices, group options)], optimizer options).
# Options are torch's keyword arguments; the C++ tests spell them out again.
CASES = {
    "sgd_plain": (torch.optim.SGD, [([0, 1, 2], {})], dict(lr=0.1)),
    "sgd_momentum": (torch.optim.SGD, [([0, 1, 2], {})],
                     dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    "sgd_nesterov": (torch.optim.SGD, [([0, 1, 2], {})],
                     dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=1e-3,
                          maximize=True)),
    "adamw_default": (torch.optim.AdamW, [([0, 1, 2], {})], dict(lr=0.01)),
    "adamw_amsgrad": (torch.optim.AdamW, [([0, 1, 2], {})],
                      dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05,
                           amsgrad=True)),
    "adamw_groups": (torch.optim.AdamW,
                     [([0, 2], {"lr": 0.03, "weight_decay": 0.1}),
                      ([1], {"weight_decay": 0.0})],
                     dict(lr=0.005)),
}
# Cases where parameter 1 has no gradient at step 3 (index 2).
SKIP_CASES = {"sgd_momentum", "adamw_default"}


def inputs():
    gen = torch.Generator().manual_seed(1234)
    init = [torch.randn(s, generator=gen, dtype=torch.float64) for s in SHAPES]
    # Gradients of varied scale, so that AdamW's normalisation matters.
    grads = [torch.randn((STEPS,) + s, generator=gen, dtype=torch.float64) *
             torch.tensor([1.0, 0.3, 2.0, 0.05, 1.5], dtype=torch.float64).reshape(
                 (STEPS,) + (1,) * len(s)) for s in SHAPES]
    return init, grads


def run_case(name, dtype, init, grads):
    cls, groups, options = CASES[name]
    params = [p.to(dtype).clone().requires_grad_(True) for p in init]
    opt = cls([dict(params=[params[i] for i in idx], **g) for idx, g in groups], **options)
    history = [[p.detach().clone()] for p in params]
    for s in range(STEPS):
        for k, p in enumerate(params):
            skip = name in SKIP_CASES and k == 1 and s == 2
            p.grad = None if skip else grads[k][s].to(dtype).clone()
        opt.step()
        for k, p in enumerate(params):
            history[k].append(p.detach().clone())
    return [torch.stack(h) for h in history]


def main():
    init, grads = inputs()
    out = {}
    for name in CASES:
        for dtype, dname in ((torch.float32, "f32"), (torch.float64, "f64")):
            for k, h in enumerate(run_case(name, dtype, init, grads)):
                out["%s.%s.p%d.params" % (name, dname, k)] = h
                out["%s.%s.p%d.grads" % (name, dname, k)] = grads[k].to(dtype)
        for k in range(len(SHAPES)):
            mask = [0 if (name in SKIP_CASES and k == 1 and s == 2) else 1 for s in range(STEPS)]
            out["%s.p%d.has_grad" % (name, k)] = torch.tensor(mask, dtype=torch.uint8)
    write_safetensors(os.path.join(HERE, "optim.safetensors"), out,
                      {"producer": "tests/golden/make_optim_golden.py", "torch": torch.__version__})


if __name__ == "__main__":
    main()
