#!/usr/bin/python3
"""Writes tests/golden/dense_layers.safetensors: inputs, parameters, outputs
and gradients of PyTorch's dense layers and losses, which tests/nn compare
libddp against (the tests never need PyTorch). Run with Debian's
python3-torch:

    /usr/bin/python3 tests/golden/make_dense_golden.py

Every case is written twice, computed in float32 and in float64, under
"<dtype>.<case>.<tensor>" (e.g. "f32.linear.dx"). Gradients are those of
sum(y * dy) for a random upstream gradient dy, so each output element gets
its own weight; scalar losses use dy = 1. The file is assembled by hand
(struct + json), reusing make_safetensors.py's writer.
"""
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_safetensors import write_safetensors  # noqa: E402

DTYPES = {"f32": torch.float32, "f64": torch.float64}


def grads(y, inputs, dy=None):
    """Gradients of sum(y * dy) (y.sum() for a scalar y) w.r.t. inputs."""
    if dy is None:
        dy = torch.ones_like(y)
    return torch.autograd.grad(y, inputs, grad_outputs=dy)


def leaf(t, dtype):
    return t.to(dtype).clone().requires_grad_(True)


def cases(dtype):
    out = {}

    def put(case, **tensors):
        for k, v in tensors.items():
            out["%s.%s" % (case, k)] = v.detach()

    # Linear with a 3-D input (leading dims [2, 3]) and bias; and without bias.
    x = leaf(torch.randn(2, 3, 5), dtype)
    lin = torch.nn.Linear(5, 4).to(dtype)
    y = lin(x)
    dy = torch.randn_like(y)
    dx, dw, db = grads(y, [x, lin.weight, lin.bias], dy)
    put("linear", x=x, weight=lin.weight, bias=lin.bias, y=y, dy=dy, dx=dx, dweight=dw, dbias=db)
    x = leaf(torch.randn(3, 5), dtype)
    lin = torch.nn.Linear(5, 2, bias=False).to(dtype)
    y = lin(x)
    dy = torch.randn_like(y)
    dx, dw = grads(y, [x, lin.weight], dy)
    put("linear_nobias", x=x, weight=lin.weight, y=y, dy=dy, dx=dx, dweight=dw)

    # LayerNorm over [6] with random affine parameters, over [4, 6], and
    # without affine parameters. Inputs with a non-zero mean and scale.
    for case, shape, norm, affine in [("layer_norm", (3, 4, 6), [6], True),
                                      ("layer_norm_2d", (2, 4, 6), [4, 6], True),
                                      ("layer_norm_noaffine", (5, 7), [7], False)]:
        x = leaf(torch.randn(*shape) * 3 + 1.5, dtype)
        ln = torch.nn.LayerNorm(norm, elementwise_affine=affine).to(dtype)
        if affine:
            with torch.no_grad():
                ln.weight.copy_(torch.randn(*norm))
                ln.bias.copy_(torch.randn(*norm))
        y = ln(x)
        dy = torch.randn_like(y)
        if affine:
            dx, dw, db = grads(y, [x, ln.weight, ln.bias], dy)
            put(case, x=x, weight=ln.weight, bias=ln.bias, y=y, dy=dy, dx=dx, dweight=dw,
                dbias=db)
        else:
            (dx,) = grads(y, [x], dy)
            put(case, x=x, y=y, dy=dy, dx=dx)

    # Activations over a spread of values (both signs, the tails).
    base = torch.cat([torch.linspace(-6, 6, 25), torch.randn(15)]).reshape(5, 8)
    for case, fn in [("gelu", lambda t: F.gelu(t)),
                     ("gelu_tanh", lambda t: F.gelu(t, approximate="tanh")),
                     ("relu", F.relu)]:
        x = leaf(base, dtype)
        y = fn(x)
        dy = torch.randn_like(y)
        (dx,) = grads(y, [x], dy)
        put(case, x=x, y=y, dy=dy, dx=dx)

    # Embedding with a repeated index (its gradient rows accumulate).
    emb = torch.nn.Embedding(7, 4).to(dtype)
    idx = torch.tensor([[0, 3, 6], [3, 3, 1]], dtype=torch.int64)
    y = emb(idx)
    dy = torch.randn_like(y)
    (dw,) = grads(y, [emb.weight], dy)
    put("embedding", index=idx, weight=emb.weight, y=y, dy=dy, dweight=dw)

    # Cross entropy: [N, C] with an ignored row, with and without label
    # smoothing, each reduction; and [N, C, d] logits.
    logits = torch.randn(6, 5) * 2
    target = torch.tensor([1, 0, 4, -100, 2, 4], dtype=torch.int64)
    for case, kw in [("ce_mean", dict()),
                     ("ce_smooth", dict(label_smoothing=0.1)),
                     ("ce_sum", dict(reduction="sum", label_smoothing=0.2)),
                     ("ce_none", dict(reduction="none", label_smoothing=0.1))]:
        x = leaf(logits, dtype)
        y = F.cross_entropy(x, target, **kw)
        dy = torch.randn_like(y) if y.dim() > 0 else torch.ones_like(y)
        (dx,) = grads(y, [x], dy)
        put(case, x=x, target=target, y=y, dy=dy, dx=dx)
    x = leaf(torch.randn(2, 5, 3), dtype)
    target3 = torch.tensor([[0, 4, 2], [1, 1, 3]], dtype=torch.int64)
    y = F.cross_entropy(x, target3)
    (dx,) = grads(y, [x])
    put("ce_nd", x=x, target=target3, y=y, dx=dx)

    # MSE: both input and target require grad.
    a = leaf(torch.randn(4, 3), dtype)
    b = leaf(torch.randn(4, 3), dtype)
    y = F.mse_loss(a, b)
    da, db = grads(y, [a, b])
    put("mse", input=a, target=b, y=y, dinput=da, dtarget=db)
    return out


def main():
    tensors = {}
    for name, dtype in DTYPES.items():
        torch.manual_seed(1234)  # the same draws for both dtypes
        for k, v in cases(dtype).items():
            tensors["%s.%s" % (name, k)] = v.contiguous()
    path = os.path.join(HERE, "dense_layers.safetensors")
    write_safetensors(path, tensors, {"producer": "tests/golden/make_dense_golden.py",
                                      "torch": torch.__version__})
    print("wrote %s (%d tensors, %d bytes)" % (path, len(tensors), os.path.getsize(path)))


if __name__ == "__main__":
    main()
