"""PyTorch definitions of libddp's models, with the same module names, shapes
and initialisation as include/ddp/nn/models/{resnet,gpt}.h, so that a
PyTorch run and a libddp run train the same network (and a state_dict loads
in either). torchvision is not needed (Debian does not package it).

Used by the reference benchmarks beside this file and by
tests/golden/make_models_golden.py. The constructors draw from torch's RNG
only for the layers' default initialisation; the libddp initialisation is a
separate call (init_resnet_, init_gpt_) so that the golden script keeps its
random stream, and so its outputs, unchanged."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or cin != planes:  # projection shortcut (He et al. option B)
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class Bottleneck(nn.Module):
    """torchvision's v1.5 bottleneck: the stride sits on the 3x3 convolution."""

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
    """resnet20/32/56 (He et al. 2016 §4.2): 3x3 stem, stages of 16/32/64
    planes with (depth - 2) / 6 basic blocks each."""

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


class ImageNetResNet(nn.Module):
    """resnet50/101 as torchvision v1.5: 7x7/2 stem, 3x3/2 max pool, four
    bottleneck stages of 64/128/256/512 planes (x4 out)."""

    def __init__(self, blocks_per_stage, cin=3, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        planes_in = 64
        for s, (planes, n) in enumerate(zip([64, 128, 256, 512], blocks_per_stage)):
            blocks = []
            for b in range(n):
                blocks.append(Bottleneck(planes_in, planes, 2 if (s > 0 and b == 0) else 1))
                planes_in = planes * 4
            setattr(self, f"layer{s + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(512 * 4, classes)

    def forward(self, x):
        y = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        y = self.layer4(self.layer3(self.layer2(self.layer1(y))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


def init_resnet_(model):
    """libddp's (= torchvision's) ResNet initialisation: convolutions
    kaiming_normal_(fan_out, relu), BatchNorm 1 / 0, fc left as nn.Linear's."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return model


def resnet20(cin=1, classes=10):
    return init_resnet_(CifarResNet(20, cin, classes))


def resnet50(cin=3, classes=1000):
    return init_resnet_(ImageNetResNet([3, 4, 6, 3], cin, classes))


def resnet101(cin=3, classes=1000):
    return init_resnet_(ImageNetResNet([3, 4, 23, 3], cin, classes))


class Attention(nn.Module):
    def __init__(self, c, heads, fused=False):
        super().__init__()
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.heads = heads
        # The fused kernel (flash / memory-efficient attention) exists from
        # torch 2.0 on; the explicit softmax path is what the golden values use.
        self.fused = fused and hasattr(F, "scaled_dot_product_attention")

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        shape = lambda t: t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        q, k, v = shape(q), shape(k), shape(v)
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            att = att.masked_fill(mask, float("-inf"))
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
    def __init__(self, c, heads, fused=False):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c)
        self.attn = Attention(c, heads, fused)
        self.ln_2 = nn.LayerNorm(c)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2 (pre-LayerNorm blocks, tanh-GELU MLP); the LM head is tied to
    wte and has no parameter of its own, as in libddp (Note [GPT-2
    architecture] in include/ddp/nn/models/gpt.h)."""

    def __init__(self, vocab, block, layers, heads, c, fused_attention=False):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, c), wpe=nn.Embedding(block, c),
            h=nn.ModuleList([Block(c, heads, fused_attention) for _ in range(layers)]),
            ln_f=nn.LayerNorm(c)))

    def forward(self, idx):
        t = self.transformer
        x = t.wte(idx) + t.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in t.h:
            x = b(x)
        return t.ln_f(x) @ t.wte.weight.t()


def init_gpt_(model):
    """GPT-2's initialisation, as libddp: weights normal(0, 0.02), biases 0,
    the residual projections normal(0, 0.02 / sqrt(2 * n_layer)),
    LayerNorm 1 / 0."""
    layers = len(model.transformer.h)
    for name, m in model.named_modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj") else 0.02
            nn.init.normal_(m.weight, 0.0, std)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return model


def gpt2_124m(fused_attention=True):
    """12 layers, 12 heads, width 768, context 1024, vocabulary 50257 (not
    padded, like libddp's gpt2_124m): 124,439,808 parameters."""
    return init_gpt_(GPT(50257, 1024, 12, 12, 768, fused_attention))
