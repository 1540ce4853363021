#!/usr/bin/env python3
"""Golden values for nn::functional::scaled_dot_product_attention, from
PyTorch (Debian's python3-torch 1.13, which predates
F.scaled_dot_product_attention, so the reference is written out with
torch ops): inputs, outputs and the gradients of q, k, v for a fixed upstream
gradient, causal and not, f32 and f64. Writes attention.safetensors beside
this script; run with /usr/bin/python3."""
import math
import os

import torch

from make_safetensors import write_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))


def reference(q, k, v, causal):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        t, s = scores.shape[-2], scores.shape[-1]
        mask = torch.ones(t, s, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def main():
    torch.manual_seed(1234)
    out = {}
    for dtype, tag in [(torch.float32, "f32"), (torch.float64, "f64")]:
        for causal, ctag in [(True, "causal"), (False, "full")]:
            B, H, T, D = 2, 3, 5, 4
            S = T if causal else 7
            q = torch.randn(B, H, T, D, dtype=dtype, requires_grad=True)
            k = torch.randn(B, H, S, D, dtype=dtype, requires_grad=True)
            v = torch.randn(B, H, S, D, dtype=dtype, requires_grad=True)
            y = reference(q, k, v, causal)
            dy = torch.randn_like(y)
            y.backward(dy)
            p = f"{ctag}.{tag}."
            for name, t in [("q", q), ("k", k), ("v", v), ("out", y), ("dout", dy),
                            ("dq", q.grad), ("dk", k.grad), ("dv", v.grad)]:
                out[p + name] = t.detach().contiguous()
    write_safetensors(os.path.join(HERE, "attention.safetensors"), out,
                      {"producer": "tests/golden/make_attention_golden.py",
                       "torch": torch.__version__})


if __name__ == "__main__":
    main()
