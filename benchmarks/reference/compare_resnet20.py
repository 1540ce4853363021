#!/usr/bin/env python3
"""libddp's train_resnet beside its PyTorch twin, in alternating rounds.

    python3 benchmarks/reference/compare_resnet20.py --rounds 3 --max-steps 120

Each round runs the libddp trainer (under ddprun with --backend gloo, or
under mpirun with --launcher mpirun) and then resnet20_fashion_mnist_ddp.py
with the same flags, each with 2 ranks, and reads images_per_s from the
JSON object each prints last. Alternating the two (rather than all libddp
runs, then all PyTorch runs) spreads any drift of the machine over both.
Prints one line per run and the median of each side with their ratio
(libddp / PyTorch); --json FILE writes them. Run it on a quiet machine: the
figures are throughput of the whole machine."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"), help="libddp build folder")
    p.add_argument("--launcher", default="ddprun", choices=["ddprun", "mpirun"],
                   help="ddprun: libddp over gloo, like the twin; mpirun: libddp's mpi backend")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-steps", type=int, default=120)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--eval-limit", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=128, help="global batch")
    p.add_argument("--torch-memory-format", default="contiguous",
                   choices=["contiguous", "channels-last"],
                   help="the PyTorch twin's layout (libddp's trainer picks its own: channels-last "
                        "on the CPU, Note [Trainer memory format])")
    p.add_argument("--json", default="", help="write the runs and medians here")
    return p.parse_args()


def last_json(stdout, who):
    for line in reversed(stdout.strip().splitlines()):
        line = re.sub(r"^\[\d+\]: ", "", line)  # ddprun's rank prefix
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{who}: no JSON line in its output:\n{stdout[-2000:]}")


def run(cmd, who):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("OMP_NUM_THREADS", None)  # both sides pick cores / local ranks themselves
    t0 = time.time()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{who} exited with {r.returncode}:\n{r.stdout[-2000:]}")
    out = last_json(r.stdout, who)
    out["wall_s"] = time.time() - t0
    return out


def main():
    a = parse_args()
    common = ["--epochs", str(a.epochs), "--max-steps", str(a.max_steps), "--eval-limit",
              str(a.eval_limit), "--batch-size", str(a.batch_size)]
    trainer = os.path.join(a.build, "examples", "train_resnet")
    if a.launcher == "ddprun":
        libddp = [os.path.join(a.build, "tools", "ddprun", "ddprun"), "--nproc-per-node",
                  str(a.nproc), trainer, "--backend", "gloo"] + common
    else:
        libddp = ["mpirun", "--oversubscribe", "-np", str(a.nproc), trainer] + common
    torch = ["/usr/bin/python3", os.path.join(HERE, "resnet20_fashion_mnist_ddp.py"), "--nproc",
             str(a.nproc), "--memory-format", a.torch_memory_format] + common
    runs = {"libddp": [], "pytorch": []}
    for r in range(a.rounds):
        for who, cmd in (("libddp", libddp), ("pytorch", torch)):
            out = run(cmd, who)
            runs[who].append(out)
            print(f"round {r + 1}/{a.rounds}  {who:8s} {out['images_per_s']:8.1f} images/s  "
                  f"train {out['train_s']:.1f} s  test accuracy {out['test_accuracy']:.4f}",
                  flush=True)
    med = {who: statistics.median(o["images_per_s"] for o in runs[who]) for who in runs}
    ratio = med["libddp"] / med["pytorch"]
    print(f"median images/s: libddp {med['libddp']:.1f}, PyTorch {med['pytorch']:.1f}; "
          f"ratio libddp / PyTorch {ratio:.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"launcher": a.launcher, "nproc": a.nproc, "args": common, "runs": runs,
                       "median_images_per_s": med, "ratio": ratio}, f, indent=1)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as e:
        print(f"compare_resnet20: {e}", file=sys.stderr)
        sys.exit(1)
