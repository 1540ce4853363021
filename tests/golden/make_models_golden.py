#!/usr/bin/env python3
"""Golden values for whole models, from PyTorch (Debian's python3-torch 1.13;
torchvision is not packaged, so the models are written out, with
torchvision's / GPT-2's module names, which is what libddp's must match, in
benchmarks/reference/torch_models.py):

  resnet20   He et al. §4.2 with projection shortcuts, 1 input channel,
             10 classes, train mode (batch statistics), batch 2x1x32x32
  bottleneck torchvision's resnet50 layer1 (three v1.5 bottlenecks,
             64 -> 256 channels), train mode, input 2x64x8x8
  gpt        GPT-2 with 2 blocks (vocab 37, context 8, 2 heads, width 16)

For each: every parameter and buffer under its state_dict name (prefixed
"<model>.param."), the input, the output, the gradient of sum(output * dout)
for a fixed random dout with respect to the input (ResNets) and to chosen
parameters ("<model>.grad.<name>"), and the BatchNorm running statistics after
the step ("<model>.after.<name>"). Writes models.safetensors beside this
script; run with /usr/bin/python3."""
import os
import sys

import torch
import torch.nn as nn

from make_safetensors import write_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
# The model definitions are shared with the PyTorch reference benchmarks.
sys.path.insert(0, os.path.join(HERE, "..", "..", "benchmarks", "reference"))
from torch_models import GPT, Bottleneck, CifarResNet  # noqa: E402


def perturb_norms(model):
    # Non-trivial BatchNorm/LayerNorm affine parameters, so a swapped weight
    # and bias would show.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm2d, nn.LayerNorm)):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)


def record(out, tag, model, x, grad_names, input_grad):
    for k, v in model.state_dict().items():
        out[f"{tag}.param.{k}"] = v.detach().clone().contiguous()
    out[f"{tag}.input"] = x.detach().clone()
    if input_grad:
        x.requires_grad_(True)
    model.train()
    y = model(x)
    dy = torch.randn_like(y)
    (y * dy).sum().backward()
    out[f"{tag}.output"] = y.detach().contiguous()
    out[f"{tag}.dout"] = dy
    if input_grad:
        out[f"{tag}.grad.input"] = x.grad.detach().contiguous()
    params = dict(model.named_parameters())
    for n in grad_names:
        out[f"{tag}.grad.{n}"] = params[n].grad.detach().contiguous()
    for k, v in model.state_dict().items():
        if "running" in k:
            out[f"{tag}.after.{k}"] = v.detach().clone().contiguous()


def main():
    torch.manual_seed(20261121)
    out = {}
    r20 = CifarResNet(20, 1, 10)
    perturb_norms(r20)
    record(out, "resnet20", r20, torch.randn(2, 1, 32, 32),
           ["conv1.weight", "layer2.0.downsample.0.weight", "layer3.2.bn2.weight",
            "layer3.2.bn2.bias", "fc.weight", "fc.bias"], True)

    stage = nn.Sequential(Bottleneck(64, 64, 1), Bottleneck(256, 64, 1), Bottleneck(256, 64, 1))
    perturb_norms(stage)
    record(out, "bottleneck", stage, torch.randn(2, 64, 8, 8),
           ["0.conv1.weight", "0.conv2.weight", "0.downsample.0.weight", "2.conv3.weight",
            "2.bn3.weight"], True)

    gpt = GPT(37, 8, 2, 2, 16)
    perturb_norms(gpt)
    idx = torch.randint(0, 37, (2, 8))
    record(out, "gpt", gpt, idx,
           ["transformer.wte.weight", "transformer.wpe.weight",
            "transformer.h.0.attn.c_attn.weight", "transformer.h.1.mlp.c_fc.bias",
            "transformer.h.1.ln_2.weight", "transformer.ln_f.bias"], False)
    write_safetensors(os.path.join(HERE, "models.safetensors"), out,
                      {"producer": "tests/golden/make_models_golden.py", "torch": torch.__version__})


if __name__ == "__main__":
    main()
