"""The table of benchmarks/scaling/run.sh: reads the rows rank 0 of each run
wrote (one JSON object per file), adds speedup over N = 1 and scaling
efficiency (DDP images/s / the same engine's no_comm images/s at the same
N), and the exposed communication per step (exposed_comm_s = the row's
median step time - the same engine's no_comm median step time at the same
N; per-step times are the slowest rank's; emulated rows in the cluster's
time), prints the table and the bucket-size sweep, and writes the rows as
one JSON list (keys nodes, engine, mode, compute, profile,
cluster_link_gbit, images_per_s, efficiency, exposed_comm_s, ...)."""
import argparse
import glob
import json
import os
import sys

MODES = ["ddp", "no_comm", "auto_buckets", "zero1", "zero1_overlap", "powersgd", "bf16", "fp16",
         "overlap"]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("rows_dir")
    p.add_argument("--gbit", default="?")
    p.add_argument("--json", default="")
    a = p.parse_args()
    rows = []
    for path in sorted(glob.glob(os.path.join(a.rows_dir, "*.json"))):
        with open(path) as f:
            row = json.load(f)
        row["sweep"] = "_cap" in os.path.basename(path)
        row.setdefault("compute", "real")
        row.setdefault("profile", row.get("model"))
        row.setdefault("cluster_link_gbit", row.get("link_gbit"))
        rows.append(row)
    if not rows:
        print("report.py: no run produced a result", file=sys.stderr)
        return 1

    def key(r):
        return (r["nodes"], r["engine"], r["sweep"], r["mode"], r.get("bucket_cap_mb", 25))

    index = {key(r): r for r in rows}
    for r in rows:
        ips = r.get("images_per_s")
        base = index.get((r["nodes"], r["engine"], False, "no_comm", 25))
        r["efficiency"] = (ips / base["images_per_s"]
                           if ips and base and base.get("images_per_s") else None)
        one = index.get((1,) + key(r)[1:])
        r["speedup"] = (ips / one["images_per_s"]
                        if ips and one and one.get("images_per_s") else None)
        med = r.get("median_step_s")
        r["exposed_comm_s"] = (med - base["median_step_s"]
                               if med is not None and base and base.get("median_step_s") is not None
                               else None)
    rows.sort(key=lambda r: (r["nodes"], r["engine"] != "libddp", r["sweep"],
                             MODES.index(r["mode"]) if r["mode"] in MODES else 99,
                             r.get("bucket_cap_mb", 25)))

    def fmt(v, spec):
        return format(v, spec) if isinstance(v, (int, float)) else "-"

    print(f"# links {a.gbit} Gbit/s (tbf); efficiency = images/s / no_comm images/s, same engine and N")
    emulated = [r for r in rows if r["compute"] == "emulated"]
    if emulated:
        r0 = emulated[0]
        print(f"# emulated {r0['profile']} on a {r0.get('cluster_link_gbit')} Gbit/s cluster link, "
              f"time stretch {r0.get('stretch')}: step times and {r0.get('sample')}/s in the "
              f"cluster's time (wall / stretch)")
    print(f"{'N':>3} {'engine':>8} {'mode':>18} {'cap MiB':>8} {'images/s':>10} {'speedup':>8} "
          f"{'efficiency':>10} {'step s':>8} {'exposed s':>9}")
    for r in rows:
        mode = r["mode"]
        cap = "auto" if r["mode"] == "auto_buckets" else fmt(r.get("bucket_cap_mb"), "g")
        print(f"{r['nodes']:>3} {r['engine']:>8} {mode:>18} {cap:>8} "
              f"{fmt(r.get('images_per_s'), '.1f'):>10} {fmt(r['speedup'], '.2f'):>8} "
              f"{fmt(r['efficiency'], '.3f'):>10} {fmt(r.get('median_step_s'), '.4f'):>8} "
              f"{fmt(r['exposed_comm_s'], '.4f'):>9}")
    # The bucket-size sweep: auto against the best fixed cap, by step time.
    for n in sorted({r["nodes"] for r in rows}):
        fixed = [r for r in rows if r["nodes"] == n and r["engine"] == "libddp"
                 and r["mode"] == "ddp" and r.get("step_s")]
        auto = [r for r in rows if r["nodes"] == n and r["engine"] == "libddp"
                and r["mode"] == "auto_buckets" and r.get("step_s")]
        if len(fixed) < 2 or not auto:
            continue
        best = min(fixed, key=lambda r: r["step_s"])
        caps = ", ".join(f"{r['bucket_cap_mb']:g} MiB {r['step_s']:.4f} s"
                         for r in sorted(fixed, key=lambda r: r["bucket_cap_mb"]))
        ratio = auto[0]["step_s"] / best["step_s"]
        print(f"# N={n} step time: {caps}; auto {auto[0]['step_s']:.4f} s "
              f"({auto[0].get('buckets', '?')} buckets) = {ratio:.3f} x the best fixed "
              f"({best['bucket_cap_mb']:g} MiB)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
