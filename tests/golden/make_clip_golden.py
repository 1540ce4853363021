#!/usr/bin/python3
"""Writes tests/golden/clip_grad.safetensors, the reference of
tests/optim/clip_grad_test.cpp: torch.nn.utils.clip_grad_norm_ on three
gradients (parameter 1 has none, which torch skips) for several norm types
and max_norm values. Run with Debian's python3-torch:

    /usr/bin/python3 tests/golden/make_clip_golden.py

Tensors, with <c> a case and <d> f32 or f64:

  <d>.g<k>               [*shape]   the gradient of parameter k (k = 0, 2)
  <c>.<d>.total_norm     [] f64     what clip_grad_norm_ returned
  <c>.<d>.g<k>           [*shape]   the gradient afterwards
"""
import math
import os

import torch

from make_safetensors import write_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = [(5, 7), (3,), (2, 3, 4)]

# name -> (max_norm, norm_type). The C++ test spells these out again.
# The gradients' 2-norm is about 7.8, their inf norm about 2.3 and their
# 1-norm about 49, so "below" clips and "above" leaves them as they are.
CASES = {
    "l2_below": (1.0, 2.0),
    "l2_above": (100.0, 2.0),
    "inf_below": (0.5, math.inf),
    "inf_above": (10.0, math.inf),
    "l1_below": (2.0, 1.0),
    "l3_below": (1.5, 3.0),
}


def main():
    gen = torch.Generator().manual_seed(99)
    grads = [torch.randn(s, generator=gen, dtype=torch.float64) for s in SHAPES]
    out = {}
    for dtype, dname in ((torch.float32, "f32"), (torch.float64, "f64")):
        for k in (0, 2):
            out["%s.g%d" % (dname, k)] = grads[k].to(dtype)
        for case, (max_norm, norm_type) in CASES.items():
            params = [torch.zeros(s, dtype=dtype, requires_grad=True) for s in SHAPES]
            for k in (0, 2):
                params[k].grad = grads[k].to(dtype).clone()
            total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
            out["%s.%s.total_norm" % (case, dname)] = total.to(torch.float64)
            for k in (0, 2):
                out["%s.%s.g%d" % (case, dname, k)] = params[k].grad.clone()
            assert params[1].grad is None
    write_safetensors(os.path.join(HERE, "clip_grad.safetensors"), out,
                      {"producer": "tests/golden/make_clip_golden.py", "torch": torch.__version__})


if __name__ == "__main__":
    main()
