#!/usr/bin/python3
"""A tiny GPT-2 checkpoint in exactly Hugging Face's layout, and its logits.

transformers is not packaged in Debian, so GPT2LMHeadModel is written out
here from its source's structure, with its parameter names and its Conv1D
modules (weight stored [in, out], y = x @ W + b). The checkpoint is what
`GPT2LMHeadModel.save_pretrained(safe_serialization=True)` of transformers
4.x before 4.31 writes: "transformer."-prefixed names, the causal-mask
buffers attn.bias and attn.masked_bias, lm_head.weight equal to wte
(tied), metadata {"format": "pt"}. Run with Debian's python3-torch:

    /usr/bin/python3 tests/golden/make_hf_gpt2_golden.py

Outputs (committed; the tests never need PyTorch):
  hf_gpt2/model.safetensors   the checkpoint (vocab 256 = bytes, context 16,
                              2 layers, 4 heads, width 32)
  hf_gpt2.safetensors         "tokens" [2, 11] and the model's "logits"
                              [2, 11, 256] (eval mode, f32)
"""
import math
import os

import torch
import torch.nn as nn

from make_safetensors import write_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB, CONTEXT, LAYERS, HEADS, WIDTH = 256, 16, 2, 4, 32


class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: a linear layer with weight [in, out]."""

    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(nx, nf).normal_(0, 0.02))
        self.bias = nn.Parameter(torch.empty(nf).normal_(0, 0.02))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight).view(
            *x.shape[:-1], self.weight.size(1))


def gelu_new(x):  # transformers.activations.NewGELUActivation (tanh approximation)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3.0))))


class GPT2Attention(nn.Module):
    def __init__(self):
        super().__init__()
        mask = torch.tril(torch.ones(CONTEXT, CONTEXT, dtype=torch.uint8)).view(1, 1, CONTEXT, CONTEXT)
        self.register_buffer("bias", mask.bool())
        self.register_buffer("masked_bias", torch.tensor(-1e4))
        self.c_attn = Conv1D(3 * WIDTH, WIDTH)
        self.c_proj = Conv1D(WIDTH, WIDTH)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(WIDTH, dim=2)
        heads = lambda t: t.view(B, T, HEADS, C // HEADS).permute(0, 2, 1, 3)
        q, k, v = heads(q), heads(k), heads(v)
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(C // HEADS)
        causal = self.bias[:, :, :T, :T]
        w = torch.where(causal, w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
        a = torch.matmul(w.softmax(dim=-1), v)
        return self.c_proj(a.permute(0, 2, 1, 3).reshape(B, T, C))


class GPT2MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = Conv1D(4 * WIDTH, WIDTH)
        self.c_proj = Conv1D(WIDTH, 4 * WIDTH)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(WIDTH, eps=1e-5)
        self.attn = GPT2Attention()
        self.ln_2 = nn.LayerNorm(WIDTH, eps=1e-5)
        self.mlp = GPT2MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, WIDTH)
        self.wpe = nn.Embedding(CONTEXT, WIDTH)
        self.h = nn.ModuleList(GPT2Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(WIDTH, eps=1e-5)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.size(1)))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = GPT2Model()
        self.lm_head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, tokens):
        return self.lm_head(self.transformer(tokens))


def main():
    torch.manual_seed(0)
    model = GPT2LMHeadModel().eval()
    with torch.no_grad():  # LayerNorms away from 1/0, so a mix-up would show
        for name, p in model.named_parameters():
            if ".ln_" in name or name.startswith("transformer.ln_f"):
                p.add_(torch.randn_like(p) * 0.1)
    tokens = torch.randint(0, VOCAB, (2, 11))
    with torch.no_grad():
        logits = model(tokens)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    assert torch.equal(state["lm_head.weight"], state["transformer.wte.weight"])
    write_safetensors(os.path.join(HERE, "hf_gpt2", "model.safetensors"), state,
                      metadata={"format": "pt"})
    write_safetensors(os.path.join(HERE, "hf_gpt2.safetensors"),
                      {"tokens": tokens, "logits": logits.float()})
    print("wrote hf_gpt2/model.safetensors ({} tensors) and hf_gpt2.safetensors".format(len(state)))


if __name__ == "__main__":
    main()
