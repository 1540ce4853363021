#!/usr/bin/python3
"""Writes tests/golden/conv_layers.safetensors: PyTorch's outputs and
gradients for the convolution-family layers, read by tests/nn/conv_test.cpp,
batch_norm_test.cpp and pooling_test.cpp. Run with Debian's python3-torch:

    /usr/bin/python3 tests/golden/make_conv_golden.py

Inputs and parameters are drawn in f32 with fixed seeds; the expected values
are computed in f64 from those same f32 numbers and stored as f32, so the
reference itself carries no f32 rounding error. For each case "<case>." the
file holds the inputs (x, weight, bias, ...), the output y, an upstream
gradient dy and the gradients dx, dweight, dbias of sum(y * dy).

The safetensors writer is the hand-written one of make_safetensors.py.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_safetensors import write_safetensors  # noqa: E402

OUT = {}


def put(prefix, **tensors):
    for name, t in tensors.items():
        OUT[f"{prefix}.{name}"] = t.detach().to(torch.float32).contiguous()


def f64_leaf(t):
    return t.detach().to(torch.float64).requires_grad_(True)


# (name, N, Cin, H, W, Cout, kernel, stride, padding, dilation, groups, bias)
CONV_CASES = [
    ("conv_basic", 2, 3, 7, 7, 4, 3, 1, 0, 1, 1, True),
    ("conv_stride2_pad1", 2, 4, 8, 9, 6, 3, 2, 1, 1, 1, True),
    ("conv_dilation", 1, 3, 9, 8, 5, (3, 2), (1, 2), (2, 1), (2, 1), 1, True),
    ("conv_groups", 2, 4, 6, 6, 6, 3, 1, 1, 1, 2, True),
    ("conv_depthwise_nobias", 2, 4, 6, 5, 8, 3, 2, 1, 1, 4, False),
    ("conv_1x1_nobias", 3, 5, 4, 4, 7, 1, 1, 0, 1, 1, False),
]


def conv_cases():
    for i, (name, n, cin, h, w, cout, k, s, p, d, g, bias) in enumerate(CONV_CASES):
        torch.manual_seed(100 + i)
        conv = torch.nn.Conv2d(cin, cout, k, stride=s, padding=p, dilation=d, groups=g, bias=bias)
        x = torch.randn(n, cin, h, w)
        conv64 = conv.double()
        xd = f64_leaf(x)
        y = conv64(xd)
        dy = torch.randn(y.shape).double()
        (y * dy).sum().backward()
        put(name, x=x, weight=conv.weight, y=y, dy=dy, dx=xd.grad, dweight=conv64.weight.grad)
        if bias:
            put(name, bias=conv.bias, dbias=conv64.bias.grad)


def batch_norm_cases():
    torch.manual_seed(200)
    c = 3
    bn = torch.nn.BatchNorm2d(c).double()
    with torch.no_grad():
        bn.weight.copy_(torch.rand(c) + 0.5)
        bn.bias.copy_(torch.randn(c))
        bn.running_mean.copy_(torch.randn(c))
        bn.running_var.copy_(torch.rand(c) + 0.5)
    x = (torch.randn(4, c, 5, 5) * 2 + 1).float()
    put("bn", x=x, weight=bn.weight, bias=bn.bias, running_mean=bn.running_mean,
        running_var=bn.running_var)
    # The values stored above are f32; rebuild the f64 module from them exactly.
    with torch.no_grad():
        for name in ("weight", "bias", "running_mean", "running_var"):
            getattr(bn, name).copy_(OUT[f"bn.{name}"])
    for mode in ("train", "eval"):
        bn.train(mode == "train")
        bn.zero_grad()
        xd = f64_leaf(x)
        y = bn(xd)
        dy = torch.randn(y.shape).double()
        (y * dy).sum().backward()
        put(f"bn_{mode}", y=y, dy=dy, dx=xd.grad, dweight=bn.weight.grad, dbias=bn.bias.grad,
            running_mean=bn.running_mean, running_var=bn.running_var)


def max_pool_cases():
    # (name, shape, kernel, stride, padding)
    for i, (name, shape, k, s, p) in enumerate([
            ("maxpool_k2", (2, 3, 8, 6), 2, None, 0),
            ("maxpool_k3s2p1", (2, 3, 9, 8), 3, 2, 1),
            ("maxpool_rect", (1, 2, 7, 9), (3, 2), (2, 1), (1, 0))]):
        torch.manual_seed(300 + i)
        x = torch.randn(*shape)
        xd = f64_leaf(x)
        y = torch.nn.MaxPool2d(k, stride=s, padding=p)(xd)
        dy = torch.randn(y.shape).double()
        (y * dy).sum().backward()
        put(name, x=x, y=y, dy=dy, dx=xd.grad)


def adaptive_avg_pool_cases():
    for i, (name, shape, out) in enumerate([
            ("adaptive_1x1", (2, 3, 5, 6), (1, 1)),
            ("adaptive_3x4", (2, 3, 7, 9), (3, 4)),
            ("adaptive_up", (1, 2, 3, 2), (5, 4))]):
        torch.manual_seed(400 + i)
        x = torch.randn(*shape)
        xd = f64_leaf(x)
        y = torch.nn.AdaptiveAvgPool2d(out)(xd)
        dy = torch.randn(y.shape).double()
        (y * dy).sum().backward()
        put(name, x=x, y=y, dy=dy, dx=xd.grad)


def main():
    conv_cases()
    batch_norm_cases()
    max_pool_cases()
    adaptive_avg_pool_cases()
    path = os.path.join(HERE, "conv_layers.safetensors")
    write_safetensors(path, OUT, metadata={"generator": "make_conv_golden.py",
                                           "torch": torch.__version__})
    print(f"wrote {path}: {len(OUT)} tensors, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
