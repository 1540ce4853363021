#!/usr/bin/env python3
"""Golden values for whole models, from PyTorch (Debian's python3-torch 1.13;
torchvision is not packaged, so the models are written out here with
torchvision's / GPT-2's module names, which is what libddp's must match):

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
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from make_safetensors import write_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))


class BasicBlock(nn.Module):
    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or cin != planes:
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class Bottleneck(nn.Module):
    def __init__(self, cin, planes, stride):
        super().__init__()
        out = planes * 4
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or cin != out:
            self.downsample = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False),
                                            nn.BatchNorm2d(out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class CifarResNet(nn.Module):
    def __init__(self, depth, cin, classes):
        super().__init__()
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(cin, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        planes_in = 16
        for s, planes in enumerate([16, 32, 64]):
            blocks = []
            for b in range(n):
                blocks.append(BasicBlock(planes_in, planes, 2 if (s > 0 and b == 0) else 1))
                planes_in = planes
            setattr(self, f"layer{s + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.layer3(self.layer2(self.layer1(y)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


class Attention(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        shape = lambda t: t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        q, k, v = shape(q), shape(k), shape(v)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        y = torch.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c, 4 * c)
        self.c_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c)
        self.attn = Attention(c, heads)
        self.ln_2 = nn.LayerNorm(c)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, c):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, c), wpe=nn.Embedding(block, c),
            h=nn.ModuleList([Block(c, heads) for _ in range(layers)]), ln_f=nn.LayerNorm(c)))

    def forward(self, idx):
        t = self.transformer
        x = t.wte(idx) + t.wpe(torch.arange(idx.shape[1]))
        for b in t.h:
            x = b(x)
        return t.ln_f(x) @ t.wte.weight.t()


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
