#!/usr/bin/env python3
"""PyTorch twin of a libddp GPT-2 124M training step: libddp's
nn::models::gpt2_124m (12 layers, 12 heads, width 768, context 1024,
vocabulary 50257 unpadded, LM head tied to wte, GPT-2 initialisation) on one
device with synthetic tokens that live on the device.

The step is the C++ benchmark's (Note [What a benchmark step is] in
benchmarks/common/train_step.h): zero_grad, forward and cross-entropy over
the vocabulary under autocast, backward (through a GradScaler for f16) and
AdamW (lr 3e-4, betas 0.9/0.999, weight decay 0.1 on every parameter), here
with torch's fused AdamW kernel where this torch has one for the device
(--no-fused-adamw: the multi-tensor one, like libddp's).

    python3 bench_gpt.py --batch-size 16 --seq-len 1024 --amp bf16 [--compile]
    python3 bench_gpt.py --device cpu --batch-size 2 --n-layer 2 --n-embd 64 \\
        --n-head 2 --seq-len 32 --vocab-size 256 --steps 2 --warmup 1

The last stdout line is a JSON object (tokens_per_s, step_s_median, ...)."""
import inspect
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402
from torch_models import GPT, init_gpt_  # noqa: E402


# The sizes, as benchmarks/common/models.cpp has them.
SIZES = ("n_layer", "n_head", "n_embd", "vocab_size", "block_size")
MODELS = {"gpt-tiny": (2, 4, 128, 256, 64), "gpt2_124m": (12, 12, 768, 50257, 1024),
          "gpt2": (12, 12, 768, 50257, 1024), "gpt2_350m": (24, 16, 1024, 50257, 1024)}


def main():
    p = bench_common.common_parser(__doc__.split("\n\n")[0], batch_size=4, steps=10, warmup=3)
    p.add_argument("--model", default="gpt2_124m", choices=sorted(MODELS))
    p.add_argument("--seq-len", type=int, default=0, help="tokens per sequence T (0: the context)")
    for name in SIZES:  # each overrides the model's own size when given
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=None)
    p.add_argument("--grad-clip", type=float, default=0.0,
                   help="clip_grad_norm_ to this (0: off, as the C++ benchmark)")
    p.add_argument("--no-fused-adamw", action="store_true",
                   help="torch's multi-tensor AdamW even where a fused kernel exists")
    p.add_argument("--no-fused-attention", action="store_true",
                   help="explicit softmax attention instead of scaled_dot_product_attention")
    args = p.parse_args()
    bench_common.check_args(p, args)
    overridden = any(getattr(args, name) is not None for name in SIZES)
    for name, size in zip(SIZES, MODELS[args.model]):
        if getattr(args, name) is None:
            setattr(args, name, size)
    if min(getattr(args, name) for name in SIZES) < 1:
        p.error("model sizes must be >= 1")
    args.seq_len = args.seq_len or args.block_size
    args.block_size = max(args.block_size, args.seq_len)  # stretched, as gpt_config() does
    if args.n_embd % args.n_head != 0:
        p.error("--n-embd must be divisible by --n-head")

    torch.manual_seed(args.seed)
    model = init_gpt_(GPT(args.vocab_size, args.block_size, args.n_layer, args.n_head,
                          args.n_embd, fused_attention=not args.no_fused_attention))
    model.to(args.device)
    n_params = sum(q.numel() for q in model.parameters())  # the tied head counts once
    compiled_model, compiled = bench_common.maybe_compile(model, args.compile)

    fused = (args.device == "cuda" and not args.no_fused_adamw
             and "fused" in inspect.signature(torch.optim.AdamW).parameters)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1,
                            **({"fused": True} if fused else {}))
    scaler = bench_common.grad_scaler(args)
    B, T = args.batch_size, args.seq_len
    tokens = torch.randint(0, args.vocab_size, (B, T + 1), device=args.device)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=True)
        with bench_common.autocast(args):  # autocast runs cross_entropy in f32
            logits = compiled_model(x)
            loss = F.cross_entropy(logits.view(-1, args.vocab_size), y.view(-1))
        scaler.scale(loss).backward()
        if args.grad_clip > 0:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        scaler.step(opt)
        scaler.update()

    print(f"gpt: {args.n_layer} layers, {args.n_head} heads, width {args.n_embd}, vocabulary "
          f"{args.vocab_size}, {n_params} parameters; batch {B} x {T} tokens, amp {args.amp}, "
          f"{args.device}, AdamW{' (fused)' if fused else ''}, torch {torch.__version__}"
          f"{', compiled' if compiled else ''}", flush=True)
    times = bench_common.time_steps(step, args)
    # llm.c's estimate, as Note [Benchmark FLOPs] in benchmarks/common/models.h:
    # 6 FLOPs per parameter per token (forward + backward matmuls) plus
    # 6·L·C·T for the attention scores and their weighted sum under the
    # causal mask.
    flops = 6 * n_params + 6 * args.n_layer * args.n_embd * T
    bench_common.report(times, B * T, "tokens", flops, n_params, args, compiled,
                        {"benchmark": "bench_gpt", "seq_len": T,
                         "model": f"{args.model} (resized)" if overridden else args.model,
                         "fused_adamw": fused})


if __name__ == "__main__":
    main()
