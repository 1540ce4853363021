#!/usr/bin/env python3
"""Plot the loss curve of a train_resnet / train_gpt metrics file as a PNG.

    tools/plot_metrics.py run.jsonl                 # writes run.png
    tools/plot_metrics.py run.jsonl -o loss.png --lr --throughput
    tools/plot_metrics.py a.jsonl b.jsonl -o cmp.png --label 1-rank --label 2-ranks

A metrics file holds one JSON object per logged step (docs/examples.md):
step, epoch, loss, lr, images_per_s or tokens_per_s, loss_scale, memory_mib.
Lines that are not JSON objects with "step" and "loss" are skipped, so a file
still being written, or one a crashed run left, plots fine. Needs matplotlib
(Debian: apt-get install python3-matplotlib).
"""

import argparse
import json
import os
import sys


def read_metrics(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                print(f"{path}:{number}: skipping a line that is not JSON", file=sys.stderr)
                continue
            if isinstance(row, dict) and "step" in row and row.get("loss") is not None:
                rows.append(row)
    # A resumed run appends to the file; if steps repeat (a run restarted
    # from an older checkpoint), the later lines win.
    by_step = {}
    for row in rows:
        by_step[row["step"]] = row
    return [by_step[s] for s in sorted(by_step)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", nargs="+", help="metrics files (JSON lines)")
    parser.add_argument("-o", "--output", help="PNG to write (default: the first file with .png)")
    parser.add_argument("--label", action="append", default=[], help="legend label per file")
    parser.add_argument("--lr", action="store_true", help="add a panel with the learning rate")
    parser.add_argument("--throughput", action="store_true", help="add a panel with images/s or tokens/s")
    parser.add_argument("--log-y", action="store_true", help="logarithmic loss axis")
    parser.add_argument("--title", default=None)
    args = parser.parse_args(argv)
    if args.label and len(args.label) != len(args.metrics):
        parser.error(f"--label: {len(args.label)} labels for {len(args.metrics)} files")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_metrics.py needs matplotlib (Debian: apt-get install python3-matplotlib)",
              file=sys.stderr)
        return 1

    runs = []
    for i, path in enumerate(args.metrics):
        rows = read_metrics(path)
        if not rows:
            print(f"{path}: no metrics lines with step and loss", file=sys.stderr)
            return 1
        label = args.label[i] if args.label else os.path.basename(path)
        runs.append((label, rows))

    panels = ["loss"] + (["lr"] if args.lr else []) + (["throughput"] if args.throughput else [])
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 3.2 * len(panels)), sharex=True,
                             squeeze=False)
    axes = [a[0] for a in axes]
    for label, rows in runs:
        steps = [r["step"] for r in rows]
        for ax, panel in zip(axes, panels):
            if panel == "loss":
                ax.plot(steps, [r["loss"] for r in rows], label=label)
            elif panel == "lr":
                ax.plot(steps, [r.get("lr") for r in rows], label=label)
            else:
                key = "images_per_s" if "images_per_s" in rows[0] else "tokens_per_s"
                ax.plot(steps, [r.get(key) for r in rows], label=label)
                ax.set_ylabel(key.replace("_per_s", "/s"))
    axes[0].set_ylabel("training loss")
    if args.log_y:
        axes[0].set_yscale("log")
    if "lr" in panels:
        axes[panels.index("lr")].set_ylabel("learning rate")
    axes[-1].set_xlabel("optimizer step")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    if len(runs) > 1:
        axes[0].legend()
    axes[0].set_title(args.title or ", ".join(label for label, _ in runs))
    fig.tight_layout()
    output = args.output or os.path.splitext(args.metrics[0])[0] + ".png"
    fig.savefig(output, dpi=120)
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
