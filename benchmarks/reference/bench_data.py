#!/usr/bin/python3
"""PyTorch's twin of bench_data: DataLoader + torchvision ImageFolder (PIL).

    /usr/bin/python3 benchmarks/reference/bench_data.py --data imagefolder:PATH --workers 2 \
        --batch-size 64 --steps 30 --json torch.json

The same pipeline as bench_data: RandomResizedCrop(224) + RandomHorizontalFlip
+ ToTensor + Normalize(ImageNet mean/std), DataLoader(shuffle=True,
drop_last=True, persistent_workers, pin_memory when a GPU is usable). Times
--steps batches after --warmup; images/s, and the peak resident memory of the
whole process tree (the main process and its worker processes), sampled every
20 ms: peak_rss_mib sums their RSS, peak_pss_mib their PSS (shared pages
divided among the processes sharing them; /proc/PID/smaps_rollup).
"""
import argparse
import json
import os
import threading
import time

import torch
import torchvision
import torchvision.transforms as T


def tree_pids(root):
    pids, todo = [], [root]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return pids


def memory_kib(pid):
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


class PeakMemory(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.rss = self.pss = 0
        self.stop = False

    def run(self):
        while not self.stop:
            r = p = 0
            for pid in tree_pids(os.getpid()):
                a, b = memory_kib(pid)
                r, p = r + a, p + b
            self.rss, self.pss = max(self.rss, r), max(self.pss, p)
            time.sleep(0.02)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="imagefolder:PATH (PATH/train when present)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if not a.data.startswith("imagefolder:"):
        ap.error("--data must be imagefolder:PATH")
    path = a.data[len("imagefolder:"):]
    if os.path.isdir(os.path.join(path, "train")):
        path = os.path.join(path, "train")
    mem = PeakMemory()
    mem.start()
    tf = T.Compose([T.RandomResizedCrop(a.image_size), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = torchvision.datasets.ImageFolder(path, tf)
    pin = torch.cuda.is_available()
    loader = torch.utils.data.DataLoader(ds, batch_size=a.batch_size, shuffle=True, drop_last=True,
                                         num_workers=a.workers, pin_memory=pin,
                                         persistent_workers=a.workers > 0)
    print(f"# bench_data.py: ImageFolder({path}, {len(ds)} images), torch {torch.__version__}, "
          f"torchvision {torchvision.__version__}")
    print(f"# workers {a.workers}, batch {a.batch_size}, warmup {a.warmup}, steps {a.steps}, "
          f"{'pinned' if pin else 'pageable (no GPU)'} batches")

    def batches():
        while True:
            yield from loader

    it = batches()
    for _ in range(a.warmup):
        next(it)
    t0 = time.perf_counter()
    images = 0
    for _ in range(a.steps):
        x, y = next(it)
        images += x.shape[0]
    seconds = time.perf_counter() - t0
    time.sleep(0.05)
    mem.stop = True
    mem.join()
    ips = images / seconds
    rss, pss = mem.rss / 1024, mem.pss / 1024
    print(f"{'images':>12} {'seconds':>10} {'images/s':>12} {'peak_rss_MiB':>14} {'peak_pss_MiB':>14}")
    print(f"{images:>12} {seconds:>10.1f} {ips:>12.1f} {rss:>14.1f} {pss:>14.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"benchmark": "bench_data.py", "torch": torch.__version__,
                       "torchvision": torchvision.__version__, "data": a.data,
                       "dataset_size": len(ds), "workers": a.workers,
                       "batch_size": a.batch_size, "warmup": a.warmup, "steps": a.steps,
                       "image_size": a.image_size, "images_per_s": ips, "seconds": seconds,
                       "peak_rss_mib": rss, "peak_pss_mib": pss}, f)
            f.write("\n")


if __name__ == "__main__":
    main()
