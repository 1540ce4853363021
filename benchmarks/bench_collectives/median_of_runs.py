#!/usr/bin/env python3
"""Runs a bench_collectives command several times and prints, per size, the
median libddp busbw, the median raw-MPI busbw and their ratio, as a markdown
table (the form docs/benchmarks.md records), then the median and the minimum
of the ratio over the sizes. One run on a shared 2-core machine is noisy; the
median of several is what we compare.

  median_of_runs.py RUNS -- mpirun ... bench_collectives --backend mpi -b 1M -e 128M ...
  median_of_runs.py RUNS -- COMMAND_A -- COMMAND_B ...

With several commands (say the same benchmark with and without an
environment variable, through mpirun -x) the runs alternate A, B, A, B, ...
so that a drift in machine load favours none, and each gets its own table.
The commands must not pass --json themselves; this script adds it."""
import json, os, statistics, subprocess, sys, tempfile


def table(rows, runs):
    print(f"| size | libddp busbw (GB/s) | raw MPI busbw (GB/s) | ratio |  (median of {runs} runs)")
    print("|---:|---:|---:|---:|")
    ratios = []
    for size in sorted(rows):
        lib = statistics.median(r["busbw_gbps"] for r in rows[size])
        raw = [r.get("raw_mpi_busbw_gbps") for r in rows[size]]
        raw = statistics.median(raw) if None not in raw else None
        ratio = f"{lib / raw:.2f}" if raw else "-"
        if raw:
            ratios.append((lib / raw, size))
        raws = f"{raw:.2f}" if raw else "-"
        print(f"| {size} | {lib:.2f} | {raws} | {ratio} |")
    if ratios:
        low, at = min(ratios)
        print(f"\nratio over the {len(ratios)} sizes: median "
              f"{statistics.median(r for r, _ in ratios):.2f}, minimum {low:.2f} (at {at} bytes)")


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(__doc__)
    runs = int(sys.argv[1])
    cmds, cmd = [], []
    for a in sys.argv[3:]:
        if a == "--":
            cmds.append(cmd)
            cmd = []
        else:
            cmd.append(a)
    cmds.append(cmd)
    if any(not c for c in cmds):
        sys.exit(__doc__)
    rows = [{} for _ in cmds]
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            for k, c in enumerate(cmds):
                path = os.path.join(tmp, f"run{i}_{k}.json")
                subprocess.run(c + ["--json", path], check=True, stdout=subprocess.DEVNULL)
                for r in json.load(open(path)):
                    if r.get("wrong") not in (0, None):
                        sys.exit(f"run {i} of command {k + 1}: {r['wrong']} wrong values at "
                                 f"{r['bytes']} bytes")
                    rows[k].setdefault(r["bytes"], []).append(r)
    for k, c in enumerate(cmds):
        if len(cmds) > 1:
            print(f"\n{'#' * 3} command {k + 1}: {' '.join(c)}\n")
        table(rows[k], runs)


if __name__ == "__main__":
    main()
