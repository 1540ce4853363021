#!/usr/bin/python3
"""Writes tests/golden/optim_trajectory.safetensors: 20 training steps of a
small model under SGD with Nesterov momentum and under AdamW with weight
decay, the issue's "equal to PyTorch" trajectories. Run with Debian's
python3-torch:

    /usr/bin/python3 tests/golden/make_optim_trajectory_golden.py

The model is y = tanh(x w1^T + b1) w2^T + b2 (4 -> 8 -> 3) with a mean
squared error loss on one fixed batch; unlike make_optim_golden.py the
gradients come from backward, so the test exercises the whole loop
(forward, backward, step, zero_grad). Tensors, with <c> a case and <d> f32
or f64:

  x, y                   f64 [16, 4], [16, 3]   the batch
  init.<name>            f64                    w1, b1, w2, b2 before step 1
  <c>.<d>.<name>         [21, *shape]           the parameter before step 1
                                                and after each step
  <c>.<d>.loss           [20]                   the loss before each step
"""
import os

import torch

from make_safetensors import write_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 20
NAMES = ["w1", "b1", "w2", "b2"]

# The C++ test (tests/optim/optim_trajectory_test.cpp) spells these out again.
CASES = {
    "sgd_nesterov": (torch.optim.SGD,
                     dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)),
    "adamw": (torch.optim.AdamW,
              dict(lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05)),
}


def inputs():
    gen = torch.Generator().manual_seed(4321)
    x = torch.randn(16, 4, generator=gen, dtype=torch.float64)
    y = torch.randn(16, 3, generator=gen, dtype=torch.float64)
    init = {
        "w1": torch.randn(8, 4, generator=gen, dtype=torch.float64) * 0.5,
        "b1": torch.randn(8, generator=gen, dtype=torch.float64) * 0.1,
        "w2": torch.randn(3, 8, generator=gen, dtype=torch.float64) * 0.5,
        "b2": torch.randn(3, generator=gen, dtype=torch.float64) * 0.1,
    }
    return x, y, init


def run_case(cls, options, dtype, x, y, init):
    params = {n: init[n].to(dtype).clone().requires_grad_(True) for n in NAMES}
    opt = cls([params[n] for n in NAMES], **options)
    xs, ys = x.to(dtype), y.to(dtype)
    history = {n: [params[n].detach().clone()] for n in NAMES}
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        h = torch.tanh(xs @ params["w1"].t() + params["b1"])
        loss = torch.nn.functional.mse_loss(h @ params["w2"].t() + params["b2"], ys)
        loss.backward()
        opt.step()
        losses.append(loss.detach().clone())
        for n in NAMES:
            history[n].append(params[n].detach().clone())
    return {n: torch.stack(h) for n, h in history.items()}, torch.stack(losses)


def main():
    x, y, init = inputs()
    out = {"x": x, "y": y}
    for n in NAMES:
        out["init." + n] = init[n]
    for case, (cls, options) in CASES.items():
        for dtype, dname in ((torch.float32, "f32"), (torch.float64, "f64")):
            history, losses = run_case(cls, options, dtype, x, y, init)
            for n in NAMES:
                out["%s.%s.%s" % (case, dname, n)] = history[n]
            out["%s.%s.loss" % (case, dname)] = losses
    write_safetensors(os.path.join(HERE, "optim_trajectory.safetensors"), out,
                      {"producer": "tests/golden/make_optim_trajectory_golden.py",
                       "torch": torch.__version__})


if __name__ == "__main__":
    main()
