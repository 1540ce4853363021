"""Writes the compute profiles of the GPU-regime twin (run.sh --compute
emulated): resnet50.json and gpt2.json beside this script. The arithmetic
is documented in docs/benchmarks.md, "GPU-regime twin"; rerun this script
after changing it:

    /usr/bin/python3 benchmarks/scaling/profiles/make_profiles.py [--check]

(--check: regenerate in memory and exit 1 when a committed file differs).

A profile describes one step of one *node* (one rank of the twin stands for
one node) in the cluster's own time: every layer in the order of the real
model's forward, with its parameters (name, shape; f32), its buffers, the
parameters of earlier layers it uses again (a tied weight), and the seconds
its forward and its backward take. Layer times come from the layer's model
FLOPs (Note [Benchmark FLOPs] in benchmarks/common/models.h): forward FLOPs
times 1 for the forward and times 2 for the backward (input gradient and
weight gradient), except the first layer, whose input needs no gradient
(times 1). Elementwise layers (BatchNorm, LayerNorm, ReLU, GELU, softmax,
pooling, embeddings) count 0 FLOPs: their time is folded into the matmul
layers' by the scaling. The times are scaled so that forward + backward +
the optimizer step = the step time the node is known to reach; the
optimizer step takes the bytes it moves over the GPU's memory bandwidth.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def layer(name, params=(), buffers=(), uses=(), flops=0.0):
    return {"name": name, "params": [[n, list(s)] for n, s in params],
            "buffers": [[n, list(s), d] for n, s, d in buffers],
            "uses": list(uses), "_flops": float(flops)}


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def finish(meta, layers, step_s, optimizer_s):
    """Scales the layers' FLOPs to forward/backward seconds so that the
    step (forward + backward + optimizer) takes step_s."""
    first = next(i for i, l in enumerate(layers) if l["_flops"] > 0)
    units = 0.0
    for i, l in enumerate(layers):
        units += l["_flops"] * (1 + (1 if i == first else 2))
    per_flop = (step_s - optimizer_s) / units
    out = []
    fwd = bwd = 0.0
    for i, l in enumerate(layers):
        f = l.pop("_flops")
        l["forward_s"] = round(f * per_flop, 9)
        l["backward_s"] = round(f * per_flop * (1 if i == first else 2), 9)
        l["forward_flops"] = f
        fwd += l["forward_s"]
        bwd += l["backward_s"]
        out.append(l)
    n_params = sum(numel(s) for l in out for _, s in l["params"])
    profile = dict(meta)
    profile.update({
        "step_s": step_s,
        "forward_s": round(fwd, 9),
        "backward_s": round(bwd, 9),
        "optimizer_s": round(optimizer_s, 9),
        "num_params": n_params,
        "gradient_bytes": 4 * n_params,
        "layers": out,
    })
    return profile


def bn(name, c):
    return layer(name, params=[("weight", [c]), ("bias", [c])],
                 buffers=[("running_mean", [c], "f32"), ("running_var", [c], "f32"),
                          ("num_batches_tracked", [], "i64")])


def conv(name, cin, cout, k, out_side):
    macs = cout * cin * k * k * out_side * out_side
    return layer(name, params=[("weight", [cout, cin, k, k])], flops=2.0 * macs)


def resnet50():
    """torchvision's resnet50 (v1.5: stride in the 3x3 conv), 224x224, as
    libddp's nn::models::resnet50 registers it; batch 64 per A100, 4 A100s
    per node at the seed's 320 img/s each: 0.2 s per step, 256 images per
    node-step."""
    images_per_gpu, gpus_per_node, imgs_per_s_per_gpu = 64, 4, 320.0
    step_s = images_per_gpu / imgs_per_s_per_gpu
    ls = [conv("conv1", 3, 64, 7, 112), bn("bn1", 64)]
    side, cin = 56, 64  # after the 3x3/2 max pool
    for s, (planes, blocks) in enumerate(zip([64, 128, 256, 512], [3, 4, 6, 3])):
        for b in range(blocks):
            stride = 2 if (s > 0 and b == 0) else 1
            out = side // stride
            p = f"layer{s + 1}.{b}."
            ls += [conv(p + "conv1", cin, planes, 1, side), bn(p + "bn1", planes),
                   conv(p + "conv2", planes, planes, 3, out), bn(p + "bn2", planes),
                   conv(p + "conv3", planes, planes * 4, 1, out), bn(p + "bn3", planes * 4)]
            if stride != 1 or cin != planes * 4:
                ls += [conv(p + "downsample.0", cin, planes * 4, 1, out),
                       bn(p + "downsample.1", planes * 4)]
            cin, side = planes * 4, out
    ls.append(layer("fc", params=[("weight", [1000, 2048]), ("bias", [1000])],
                    flops=2.0 * 2048 * 1000))
    n_params = sum(numel(s) for l in ls for _, s in l["params"])
    # SGD with momentum: read p, g, m; write p, m (4 bytes each), A100 40 GB
    # at 1.555 TB/s.
    optimizer_s = n_params * 5 * 4 / 1.555e12
    meta = {
        "name": "resnet50",
        "description": "ResNet-50 at 224x224, one node of 4 A100s at the seed's 320 img/s "
                       "per GPU, batch 64 per GPU (0.2 s per step); f32 gradients",
        "sample": "images",
        "samples_per_step": images_per_gpu * gpus_per_node,
        "optimizer": "SGD momentum 0.9",
    }
    # Every image costs 3 x forward FLOPs per image; per node-step the layer
    # FLOPs are per image (the scaling makes the batch irrelevant).
    return finish(meta, ls, step_s, optimizer_s)


def gpt2():
    """GPT-2 124M (12 layers, 768 wide, 12 heads, vocab 50257, context
    1024, tied LM head) as libddp's nn::models::GPT registers it, on one
    H100 at llm.c's ~460K tokens/s, batch 16 x 1024 tokens per step."""
    L, C, V, T = 12, 768, 50257, 1024
    batch, tokens_per_s = 16, 460e3
    step_s = batch * T / tokens_per_s
    ln = lambda name: layer(name, params=[("weight", [C]), ("bias", [C])])  # noqa: E731
    ls = [layer("transformer.wte", params=[("weight", [V, C])]),
          layer("transformer.wpe", params=[("weight", [T, C])])]
    for i in range(L):
        p = f"transformer.h.{i}."
        ls += [ln(p + "ln_1"),
               layer(p + "attn.c_attn", params=[("weight", [3 * C, C]), ("bias", [3 * C])],
                     flops=2.0 * C * 3 * C),
               # scores and their weighted sum under the causal mask: llm.c's
               # 6·L·C·T per trained token is 2·C·T per layer forward
               layer(p + "attn.core", flops=2.0 * C * T),
               layer(p + "attn.c_proj", params=[("weight", [C, C]), ("bias", [C])],
                     flops=2.0 * C * C),
               ln(p + "ln_2"),
               layer(p + "mlp.c_fc", params=[("weight", [4 * C, C]), ("bias", [4 * C])],
                     flops=2.0 * C * 4 * C),
               layer(p + "mlp.c_proj", params=[("weight", [C, 4 * C]), ("bias", [C])],
                     flops=2.0 * 4 * C * C)]
    ls += [ln("transformer.ln_f"),
           layer("lm_head", uses=["transformer.wte.weight"], flops=2.0 * C * V)]
    n_params = sum(numel(s) for l in ls for _, s in l["params"])
    # AdamW: read p, g, m, v; write p, m, v (4 bytes each), H100 SXM at
    # 3.35 TB/s.
    optimizer_s = n_params * 7 * 4 / 3.35e12
    meta = {
        "name": "gpt2",
        "description": "GPT-2 124M, one H100 at llm.c's ~460K tokens/s, batch 16 x 1024 "
                       "tokens per step; f32 gradients",
        "sample": "tokens",
        "samples_per_step": batch * T,
        "optimizer": "AdamW",
    }
    return finish(meta, ls, step_s, optimizer_s)


def render(profile):
    # One layer per line: diffable, and still one JSON document.
    head = {k: v for k, v in profile.items() if k != "layers"}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f" {json.dumps(k)}: {json.dumps(v)},")
    lines.append(' "layers": [')
    rows = [" " + json.dumps(l) for l in profile["layers"]]
    lines.append(",\n".join(rows))
    lines.append(" ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true")
    a = p.parse_args()
    bad = 0
    for profile in (resnet50(), gpt2()):
        path = os.path.join(HERE, profile["name"] + ".json")
        text = render(profile)
        json.loads(text)
        if a.check:
            with open(path) as f:
                if f.read() != text:
                    print(f"make_profiles: {path} differs from what this script makes")
                    bad = 1
            continue
        with open(path, "w") as f:
            f.write(text)
        fwd, bwd = profile["forward_s"], profile["backward_s"]
        print(f"{path}: {len(profile['layers'])} layers, {profile['num_params']} parameters "
              f"({profile['gradient_bytes'] / 1e6:.1f} MB of f32 gradients), step "
              f"{profile['step_s']:.4f} s = forward {fwd:.4f} + backward {bwd:.4f} + "
              f"optimizer {profile['optimizer_s']:.6f} s")
    return bad


if __name__ == "__main__":
    sys.exit(main())
