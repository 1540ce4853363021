#!/usr/bin/env python3
"""PyTorch twin of benchmarks/bench_resnet: the training-step throughput of
ResNet-50 (torchvision v1.5 layout and initialisation, the same network as
libddp's nn::models::resnet50) on one device, with synthetic data that lives
on the device, so neither data loading nor host copies are measured.

The step is the C++ benchmark's (Note [What a benchmark step is] in
benchmarks/common/train_step.h): zero_grad, forward and cross-entropy under
autocast, backward (through a GradScaler for f16), and SGD (lr 0.01,
momentum 0.9, weight decay 1e-4 on every parameter; torch's default
multi-tensor implementation where it has one).

    python3 bench_resnet.py --batch-size 256 --amp bf16 --channels-last [--compile]
    python3 bench_resnet.py --device cpu --batch-size 2 --image-size 32 --steps 2 --warmup 1
    python3 bench_resnet.py --device cpu --batch-size 8 --threads 2 --channels-last --eval

With --eval the step is inference instead: model.eval(), forward and
cross-entropy under torch.no_grad() (no backward, no optimizer).

The last stdout line is a JSON object (images_per_s, step_s_median, ...)."""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402
from torch_models import resnet20, resnet50, resnet101  # noqa: E402

MODELS = {"resnet20": lambda: resnet20(3, 10), "resnet50": lambda: resnet50(3, 1000),
          "resnet101": lambda: resnet101(3, 1000)}
CIFAR_STYLE = {"resnet20"}  # 32x32 images, 10 classes


def forward_flops_per_image(model, image_size):
    """Note [Benchmark FLOPs] in benchmarks/common/models.h: the multiply-
    accumulates of every convolution and of the classifier, x 2 FLOPs per
    MAC (BatchNorm, ReLU, pooling left out); the caller multiplies by 3 for
    forward + backward. resnet50 at 224: 4.09 GMAC -> 8.18 GFLOP forward."""
    macs = []

    def count(module, inputs, output):
        if isinstance(module, nn.Conv2d):
            k = module.kernel_size[0] * module.kernel_size[1]
            macs.append(output[0].numel() * k * module.in_channels // module.groups)
        else:  # nn.Linear
            macs.append(module.in_features * module.out_features)

    hooks = [m.register_forward_hook(count) for m in model.modules()
             if isinstance(m, (nn.Conv2d, nn.Linear))]
    was_training = model.training
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, 3, image_size, image_size))
    model.train(was_training)
    for h in hooks:
        h.remove()
    return 2 * sum(macs)


def main():
    p = bench_common.common_parser(__doc__.split("\n\n")[0], batch_size=32, steps=20, warmup=5)
    p.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    p.add_argument("--image-size", type=int, default=0,
                   help="image side (default 224, or 32 for resnet20)")
    p.add_argument("--channels-last", action="store_true",
                   help="NHWC model and input (what lets cuDNN use tensor cores well)")
    p.add_argument("--eval", action="store_true",
                   help="time inference instead: forward + loss in eval mode under no_grad")
    args = p.parse_args()
    bench_common.check_args(p, args)
    args.image_size = args.image_size or (32 if args.model in CIFAR_STYLE else 224)
    if args.image_size < (8 if args.model in CIFAR_STYLE else 32):
        p.error(f"--image-size: too small for {args.model}'s downsampling")

    torch.manual_seed(args.seed)
    torch.backends.cudnn.benchmark = True  # pick the fastest convolution algorithms once
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = MODELS[args.model]()
    classes = model.fc.out_features
    # On the CPU, before moving it; x 3 for a training step's two backward passes.
    flops = forward_flops_per_image(model, args.image_size) * (1 if args.eval else 3)
    model.to(args.device, memory_format=fmt)
    compiled_model, compiled = bench_common.maybe_compile(model, args.compile)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    scaler = bench_common.grad_scaler(args)
    x = torch.randn(args.batch_size, 3, args.image_size, args.image_size,
                    device=args.device).contiguous(memory_format=fmt)
    y = torch.randint(0, classes, (args.batch_size,), device=args.device)

    if args.eval:
        model.eval()

    def step():
        if args.eval:
            with torch.no_grad(), bench_common.autocast(args):
                F.cross_entropy(compiled_model(x), y)
            return
        opt.zero_grad(set_to_none=True)
        with bench_common.autocast(args):
            loss = F.cross_entropy(compiled_model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    n_params = sum(q.numel() for q in model.parameters())
    print(f"{args.model}, {n_params} parameters, batch "
          f"{args.batch_size} of 3x{args.image_size}x{args.image_size}, amp {args.amp}, "
          f"{'channels-last' if args.channels_last else 'NCHW'}, {args.device}, "
          f"torch {torch.__version__}{', compiled' if compiled else ''}", flush=True)
    times = bench_common.time_steps(step, args)
    bench_common.report(times, args.batch_size, "images", flops, n_params, args, compiled,
                        {"benchmark": "bench_resnet", "model": args.model,
                         "image_size": args.image_size, "channels_last": args.channels_last,
                         "eval": args.eval})


if __name__ == "__main__":
    main()
