#!/usr/bin/python3
"""Writes tests/golden/grad_scaler.safetensors, the reference of
tests/amp/grad_scaler_test.cpp: torch.cuda.amp.GradScaler driving
torch.optim.SGD through scripted sequences of finite and non-finite
gradients. Run with Debian's python3-torch (a CPU build):

    /usr/bin/python3 tests/golden/make_grad_scaler_golden.py

Note [GradScaler reference on a CPU-only torch]
torch 1.13's GradScaler is Python code around two CUDA-only kernels,
torch._amp_foreach_non_finite_check_and_unscale_ and torch._amp_update_scale_
(on CPU tensors both fail with "Could not run ... with arguments from the
'CPU' backend"), and it disables itself when CUDA is unavailable. So this
script runs torch's own GradScaler class (its per-optimizer stages, skip
decision and found_inf bookkeeping) on CPU tensors, with three stand-ins:
  - amp_definitely_not_available() answers False, so the scaler stays on;
  - _MultiDeviceReplicator accepts CPU tensors (its CUDA assertion removed);
  - the two kernels are replaced by the Python functions below, written
    from the behaviour torch documents for them (GradScaler docstring and
    the kernels' comments): unscale multiplies every gradient by inv_scale
    and sets found_inf to 1 if any element is inf or NaN; update multiplies
    the f32 scale by backoff_factor and zeroes the growth tracker on
    found_inf, else counts a good step and, on reaching growth_interval,
    multiplies the scale by growth_factor (kept only if finite) and zeroes
    the tracker.
scale(loss) asserts a CUDA tensor, so the gradients are set directly as
raw gradient * current scale, which is what backward of a scaled loss gives.

Per scenario <s> (options in SCENARIOS, also spelled out in the C++ test)
with T steps and parameters p0 [3], p1 [2, 2] (f32):
  <s>.p<k>.init          [*shape]      the parameter before step 1
  <s>.p<k>.raw_grad      [T, *shape]   the unscaled gradient of each step
  <s>.p<k>.bad           U8 [T]        0 finite, 1 put +inf, 2 put NaN, 3 put
                                       -inf into element 0 of the scaled grad
  <s>.p<k>.params        [T, *shape]   the parameter after each step
  <s>.scale              f64 [T + 1]   the scale before each step and at the end
  <s>.stepped            U8 [T]        1 where the optimizer stepped
  <s>.growth_tracker     f64 [T]       the growth tracker after each update
"""
import math
import os

import torch
import torch.cuda.amp.grad_scaler as gs

from make_safetensors import write_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = [(3,), (2, 2)]

# name -> (GradScaler options, explicit unscale_ before step, bad pattern).
# Pattern letters: '.' finite, 'i' +inf in p0, 'n' NaN in p1, 'm' -inf in p1.
SCENARIOS = {
    "basic": (dict(init_scale=2.0 ** 10, growth_factor=2.0, backoff_factor=0.5,
                   growth_interval=3), False, "......i...nn.......iim..."),
    "unscale_first": (dict(init_scale=2.0 ** 16, growth_factor=4.0, backoff_factor=0.25,
                           growth_interval=2), True, "..i.....n..m...."),
    "overflow_guard": (dict(init_scale=2.0 ** 126, growth_factor=4.0, backoff_factor=0.5,
                            growth_interval=1), False, "..i..."),
}
BAD = {".": 0, "i": 1, "n": 2, "m": 3}
BAD_VALUE = {1: math.inf, 2: math.nan, 3: -math.inf}


def unscale_reference(grads, found_inf, inv_scale):
    for g in grads:
        if not bool(torch.isfinite(g).all()):
            found_inf.fill_(1.0)
        g.mul_(inv_scale)


def update_scale_reference(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                           growth_interval):
    if float(found_inf) != 0.0:
        scale.mul_(backoff_factor)  # f32 tensor: f32 arithmetic, as the kernel
        growth_tracker.fill_(0)
    else:
        successful = int(growth_tracker) + 1
        if successful == growth_interval:
            grown = scale * growth_factor
            if bool(torch.isfinite(grown).all()):
                scale.copy_(grown)
            growth_tracker.fill_(0)
        else:
            growth_tracker.fill_(successful)
    return scale


class CpuReplicator(gs._MultiDeviceReplicator):
    def __init__(self, master_tensor):  # torch's, without the CUDA assertion
        self.master = master_tensor
        self._per_device_tensors = {}


def patch_torch():
    gs.amp_definitely_not_available = lambda: False
    gs._MultiDeviceReplicator = CpuReplicator
    torch._amp_foreach_non_finite_check_and_unscale_ = unscale_reference
    torch._amp_update_scale_ = update_scale_reference


def which_param(letter):
    return 0 if letter == "i" else 1


def run(name, gen):
    options, unscale_first, pattern = SCENARIOS[name]
    steps = len(pattern)
    params = [torch.randn(s, generator=gen).requires_grad_(True) for s in SHAPES]
    raw = [torch.randn((steps,) + s, generator=gen) for s in SHAPES]
    out = {}
    for k, p in enumerate(params):
        out["%s.p%d.init" % (name, k)] = p.detach().clone()
        out["%s.p%d.raw_grad" % (name, k)] = raw[k]
    opt = torch.optim.SGD(params, lr=0.1)
    scaler = gs.GradScaler(**options)
    scaler._lazy_init_scale_growth_tracker(torch.device("cpu"))
    bad = [[0] * steps for _ in params]
    scales, stepped, trackers, history = [], [], [], [[] for _ in params]
    for s, letter in enumerate(pattern):
        scale = scaler.get_scale()
        scales.append(scale)
        for k, p in enumerate(params):
            p.grad = raw[k][s] * torch.tensor(scale, dtype=torch.float32)
        if letter != ".":
            k = which_param(letter)
            bad[k][s] = BAD[letter]
            params[k].grad.view(-1)[0] = BAD_VALUE[BAD[letter]]
        if unscale_first:
            scaler.unscale_(opt)
        before = [p.detach().clone() for p in params]
        scaler.step(opt)
        stepped.append(int(any(not torch.equal(b, p) for b, p in zip(before, params))))
        scaler.update()
        trackers.append(scaler._get_growth_tracker())
        for k, p in enumerate(params):
            history[k].append(p.detach().clone())
    scales.append(scaler.get_scale())
    for k in range(len(params)):
        out["%s.p%d.bad" % (name, k)] = torch.tensor(bad[k], dtype=torch.uint8)
        out["%s.p%d.params" % (name, k)] = torch.stack(history[k])
    out[name + ".scale"] = torch.tensor(scales, dtype=torch.float64)
    out[name + ".stepped"] = torch.tensor(stepped, dtype=torch.uint8)
    out[name + ".growth_tracker"] = torch.tensor(trackers, dtype=torch.float64)
    return out


def main():
    patch_torch()
    gen = torch.Generator().manual_seed(2024)
    out = {}
    for name in SCENARIOS:
        out.update(run(name, gen))
    write_safetensors(os.path.join(HERE, "grad_scaler.safetensors"), out,
                      {"producer": "tests/golden/make_grad_scaler_golden.py",
                       "torch": torch.__version__})


if __name__ == "__main__":
    main()
