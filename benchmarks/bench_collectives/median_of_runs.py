#!/usr/bin/env python3
"""Runs a bench_collectives command several times and prints, per size, the
median libddp busbw, the median raw-MPI busbw and their ratio, as a markdown
table (the form docs/benchmarks.md records). One run on a shared 2-core
machine is noisy; the median of several is what we compare.

  median_of_runs.py RUNS -- mpirun ... bench_collectives --backend mpi -b 1M -e 128M ...

The command must not pass --json itself; this script adds it."""
import json, os, statistics, subprocess, sys, tempfile

def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(__doc__)
    runs, cmd = int(sys.argv[1]), sys.argv[3:]
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            path = os.path.join(tmp, f"run{i}.json")
            subprocess.run(cmd + ["--json", path], check=True, stdout=subprocess.DEVNULL)
            for r in json.load(open(path)):
                if r.get("wrong") not in (0, None):
                    sys.exit(f"run {i}: {r['wrong']} wrong values at {r['bytes']} bytes")
                rows.setdefault(r["bytes"], []).append(r)
    print(f"| size | libddp busbw (GB/s) | raw MPI busbw (GB/s) | ratio |  (median of {runs} runs)")
    print("|---:|---:|---:|---:|")
    for size in sorted(rows):
        lib = statistics.median(r["busbw_gbps"] for r in rows[size])
        raw = [r.get("raw_mpi_busbw_gbps") for r in rows[size]]
        raw = statistics.median(raw) if None not in raw else None
        ratio = f"{lib / raw:.2f}" if raw else "-"
        raws = f"{raw:.2f}" if raw else "-"
        print(f"| {size} | {lib:.2f} | {raws} | {ratio} |")

if __name__ == "__main__":
    main()
