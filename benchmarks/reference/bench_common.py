"""What bench_resnet.py and bench_gpt.py share: the common flags, autocast
and loss scaling, optional torch.compile, the timed loop and the report."""
import argparse
import contextlib
import json
import os
import resource
import statistics
import time

import torch


def common_parser(description, batch_size, steps, warmup):
    """The flags both benchmarks share; the defaults are the C++ benchmark's."""
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   choices=["cuda", "cpu"])
    p.add_argument("--batch-size", type=int, default=batch_size)
    p.add_argument("--amp", default="off", choices=["bf16", "f16", "off"],
                   help="autocast dtype; f16 adds a GradScaler")
    p.add_argument("--steps", type=int, default=steps, help="timed steps")
    p.add_argument("--warmup", type=int, default=warmup, help="untimed steps first")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (torch >= 2)")
    p.add_argument("--peak-tflops", type=float, default=0.0,
                   help="the device's peak for MFU (default on CUDA: 989.4, H100/H200 SXM "
                        "dense bf16; on a CPU none, so MFU is n/a, as in bench_resnet)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads (default: OMP_NUM_THREADS or all cores)")
    p.add_argument("--json", default="", help="also write the JSON object to this file")
    return p


def check_args(p, args):
    if args.steps < 1 or args.warmup < 0 or args.batch_size < 1:
        p.error("--steps and --batch-size must be >= 1, --warmup >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no usable GPU")
    if args.amp == "f16" and args.device == "cpu":
        p.error("--amp f16: CPU autocast takes bf16 only")
    if args.threads > 0 and args.device == "cuda":
        p.error("--threads applies to --device cpu only")
    if args.device == "cpu":
        # As the C++ benchmarks: --threads, else OMP_NUM_THREADS, else every
        # logical core (torch's own default counts physical cores only).
        threads = args.threads or int(os.environ.get("OMP_NUM_THREADS") or 0) or os.cpu_count()
        torch.set_num_threads(threads)


def maybe_compile(model, wanted):
    """torch.compile when asked and available; returns (model, compiled)."""
    if not wanted:
        return model, False
    if not hasattr(torch, "compile"):
        print(f"--compile: torch {torch.__version__} has no torch.compile; running eager")
        return model, False
    return torch.compile(model), True


def autocast(args):
    if args.amp == "off":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if args.amp == "bf16" else torch.float16
    return torch.autocast(device_type=args.device, dtype=dtype)


def grad_scaler(args):
    # Dynamic loss scaling is what f16 training needs; with bf16 or f32 the
    # scaler is disabled and scale()/step() pass through.
    return torch.cuda.amp.GradScaler(enabled=args.amp == "f16")


def time_steps(step, args):
    """Runs step() warmup + steps times and returns the timed steps' seconds.
    Each step ends with a device synchronisation, so a step's time covers
    all of its kernels (and nothing of the next)."""
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    for _ in range(args.warmup):
        step()
    sync()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return times


def peak_memory_mib(device):
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def quantile(sorted_values, q):
    """Linear interpolation between the closest ranks (numpy's default)."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def report(times, items_per_step, unit, flops_per_item, num_params, args, compiled, extra):
    """Prints a summary and, as the last line, the JSON object, with the C++
    benchmarks' keys (benchmarks/common/report.cpp) where they exist.
    Throughput is items per step over the MEDIAN step time, as there, so a
    few steps slowed by something else on the machine do not move it.
    flops_per_sample is per image for ResNets and per token for GPTs."""
    t = sorted(times)
    median = statistics.median(t)
    rate = items_per_step / median
    tflops = rate * flops_per_item / 1e12
    out = {"benchmark": extra.pop("benchmark"), "model": extra.pop("model"),
           "device": args.device,
           "device_name": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
           "threads": torch.get_num_threads() if args.device == "cpu" else None,
           "batch_size": args.batch_size}
    out.update(extra)
    peak = args.peak_tflops or (989.4 if args.device == "cuda" else 0.0)
    mfu = tflops / peak if peak > 0 else None
    out.update({
        "amp": args.amp, "warmup": args.warmup, "steps": args.steps, "num_params": num_params,
        "flops_per_sample": flops_per_item,
        "step_s_median": median, "step_s_p10": quantile(t, 0.1), "step_s_p90": quantile(t, 0.9),
        "step_s_min": t[0], "step_s_max": t[-1], "step_s_mean": statistics.fmean(t),
        f"{unit}_per_s": rate, "tflops": tflops, "peak_tflops": peak or None,
        "mfu": mfu, "peak_memory_mib": peak_memory_mib(args.device),
        "compile": compiled, "torch": torch.__version__,
    })
    print(f"{rate:.1f} {unit}/s, step median {1e3 * median:.2f} ms (p10 {1e3 * out['step_s_p10']:.2f}, "
          f"p90 {1e3 * out['step_s_p90']:.2f}), {tflops:.2f} TFLOP/s, MFU "
          f"{f'{100 * mfu:.2f}% of {peak}' if mfu is not None else 'n/a'}, "
          f"peak memory {out['peak_memory_mib']:.0f} MiB")
    line = json.dumps(out)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    print(line, flush=True)
