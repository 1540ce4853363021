#!/usr/bin/python3
"""Reads a trainer's --tensorboard event files back with TensorBoard's own
event reader and checks them against the trainer's --metrics JSON lines.

    tensorboard_readback.py resnet TRAIN_RESNET WORK_DIR
    tensorboard_readback.py gpt TRAIN_GPT WORK_DIR
    tensorboard_readback.py unwritable TRAIN_RESNET WORK_DIR

resnet/gpt: one rank trains a few steps on synthetic data with --log-every 1;
every JSON line's loss, lr and throughput must appear under train/<key> at
the same step (equal to the float32 TensorBoard stores, within the 6
significant digits the JSON line prints), plus test/accuracy (resnet) or
val/loss (gpt) equal to the final JSON line, and comm/exposed_s at every
logged step. unwritable: --tensorboard under a regular file must fail with
exit status 1 and a message naming the folder, before any training step.
"""

import glob
import json
import math
import os
import shutil
import subprocess
import sys

from tensorboard.backend.event_processing import event_accumulator


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def close(a, b):
    # JSON lines print %.6g (off by at most half a unit in the 6th digit,
    # 5e-6 relative); TensorBoard stores float32 (6e-8 relative).
    return math.isclose(a, b, rel_tol=5.1e-6, abs_tol=1e-12)


def run(cmd, env_extra=None):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)


def check_trainer(kind, exe, work):
    tb_dir, jsonl = os.path.join(work, "tb"), os.path.join(work, "metrics.jsonl")
    if kind == "resnet":
        args = ["--data", "synthetic", "--synthetic-size", "96", "--batch-size", "16",
                "--epochs", "1", "--eval-limit", "32", "--log-every", "1", "--workers", "1"]
        rate_key, final_tag, final_key = "images_per_s", "test/accuracy", "test_accuracy"
    else:
        args = ["--model", "gpt-tiny", "--block-size", "32", "--batch-size", "4", "--steps", "5",
                "--val-batches", "2", "--log-every", "1"]
        rate_key, final_tag, final_key = "tokens_per_s", "val/loss", "val_loss"
    res = run([exe] + args + ["--metrics", jsonl, "--tensorboard", tb_dir])
    if res.returncode != 0:
        fail(f"{exe} exited {res.returncode}:\n{res.stdout}\n{res.stderr}")
    final = json.loads(res.stdout.strip().splitlines()[-1])
    lines = [json.loads(l) for l in open(jsonl) if l.strip()]
    if len(lines) < 3:
        fail(f"expected several metrics lines, got {len(lines)}")

    files = glob.glob(os.path.join(tb_dir, "events.out.tfevents.*"))
    if len(files) != 1:
        fail(f"expected one event file in {tb_dir}, found {files}")
    acc = event_accumulator.EventAccumulator(tb_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    want = {"train/loss", "train/lr", "train/" + rate_key, "comm/exposed_s", final_tag}
    if not want <= tags:
        fail(f"tags {sorted(tags)} lack {sorted(want - tags)}")

    for tag, key in [("train/loss", "loss"), ("train/lr", "lr"), ("train/" + rate_key, rate_key)]:
        events = acc.Scalars(tag)
        got = [(e.step, e.value) for e in events]
        expected = [(l["step"], l[key]) for l in lines]
        if [s for s, _ in got] != [s for s, _ in expected]:
            fail(f"{tag}: steps {[s for s, _ in got]} != metrics lines' {[s for s, _ in expected]}")
        for (step, v), (_, w) in zip(got, expected):
            if not close(v, w):
                fail(f"{tag} at step {step}: TensorBoard {v!r} != metrics line {w!r}")
        print(f"ok: {tag} matches {len(got)} metrics lines")
    exposed = acc.Scalars("comm/exposed_s")
    if [e.step for e in exposed] != [l["step"] for l in lines] or any(e.value < 0 for e in exposed):
        fail(f"comm/exposed_s: {[(e.step, e.value) for e in exposed]}")
    last = acc.Scalars(final_tag)[-1]
    if last.step != final["steps"] or not close(last.value, final[final_key]):
        fail(f"{final_tag}: last event ({last.step}, {last.value}) != final line "
             f"({final['steps']}, {final[final_key]})")
    print(f"ok: {final_tag} = {last.value} at step {last.step}, as in the final JSON line")


def check_unwritable(exe, work):
    blocker = os.path.join(work, "a_file")
    with open(blocker, "w") as f:
        f.write("not a folder\n")
    bad = os.path.join(blocker, "tb")
    res = run([exe, "--data", "synthetic", "--synthetic-size", "64", "--batch-size", "16",
               "--max-steps", "2", "--tensorboard", bad])
    out = res.stdout + res.stderr
    if res.returncode != 1:
        fail(f"expected exit status 1, got {res.returncode}:\n{out}")
    if bad not in res.stderr:
        fail(f"the message does not name {bad}:\n{res.stderr}")
    if "step 1/" in out:
        fail(f"training started before the error:\n{out}")
    print("ok: unwritable --tensorboard folder: " + res.stderr.strip().splitlines()[-1])


def main():
    kind, exe, work = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    if kind == "unwritable":
        check_unwritable(exe, work)
    else:
        check_trainer(kind, exe, work)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
