#!/bin/bash
# CI smoke test of the GPU-regime twin (ctest bench.scaling.emulated_np2):
# run.sh --compute emulated at N = 2, ResNet-50's profile on a 10 Gbit/s
# cluster link stretched 4x (2.5 Gbit/s shaped links), 1 warm-up and 2
# timed steps, libddp and, where /usr/bin/python3 has torch, the PyTorch
# twin. Checks the JSON rows: every (engine, mode) present, compute /
# profile / cluster_link_gbit as asked, efficiency in (0, 1.2], exposed
# communication >= -4 ms (> 0 is not required: two steps are noisy, but a
# negative one beyond the noise would mean no_comm is slower than ddp),
# the no_comm step within [0.95, 1.6] x the profile's step (the waits are
# really taken, and stretched), the gradients checked on every rank (rank
# 0 reports grad_check), and the same gradient element count on both
# engines, the profile's. libddp's overlap mode (overlap_step, 3 priority
# buckets) runs too, with the same checks. Exits 77 (a skip) where run.sh cannot make
# namespaces. About 40 s.
#
#   emulated_smoke.sh SCALING_MAIN JSON
set -u
here=$(cd "$(dirname "$0")" && pwd)
main=$1 json=$2
python=/usr/bin/python3
engines=libddp
"$python" -c "import torch" 2>/dev/null && engines=libddp,pytorch || echo "note: no torch in $python; libddp only"
rm -f "$json"
"$here/run.sh" --compute emulated --profile resnet50 --cluster-link-gbit 10 --stretch 4 \
  --nodes 2 --steps 2 --warmup 1 --engines "$engines" --modes ddp,no_comm,overlap \
  --priority-buckets 3 --main "$main" --json "$json"
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "FAIL: run.sh exited $rc"; exit 1; }
"$python" - "$json" "$engines" "$here/profiles/resnet50.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
engines = sys.argv[2].split(",")
profile = json.load(open(sys.argv[3]))
want = {(e, m) for e in engines for m in ("ddp", "no_comm")} | {("libddp", "overlap")}
got = {(r["engine"], r["mode"]): r for r in rows if r["nodes"] == 2}
missing = want - set(got)
assert not missing, f"rows missing: {sorted(missing)}"
for (engine, mode), r in got.items():
    name = f"{engine}/{mode}"
    for k in ("nodes", "engine", "mode", "compute", "profile", "cluster_link_gbit",
              "images_per_s", "efficiency", "exposed_comm_s", "grad_elements"):
        assert k in r and r[k] is not None, f"{name}: no key {k}"
    assert r["compute"] == "emulated", f"{name}: compute {r['compute']}"
    assert r["profile"] == "resnet50", f"{name}: profile {r['profile']}"
    assert r["cluster_link_gbit"] == 10, f"{name}: cluster_link_gbit {r['cluster_link_gbit']}"
    assert r["grad_check"] == "ok", f"{name}: gradients {r['grad_check']}"
    assert r["grad_elements"] == profile["num_params"], \
        f"{name}: {r['grad_elements']} gradient elements, the profile has {profile['num_params']}"
    assert r["images_per_s"] > 0, f"{name}: images_per_s {r['images_per_s']}"
    assert 0 < r["efficiency"] <= 1.2, f"{name}: efficiency {r['efficiency']}"
    # Two timed steps: a few ms of scheduling noise either way is expected.
    assert r["exposed_comm_s"] >= -0.004, f"{name}: exposed_comm_s {r['exposed_comm_s']}"
    if mode == "no_comm":
        ratio = r["median_step_s"] / profile["step_s"]
        assert 0.95 <= ratio <= 1.6, f"{name}: step {r['median_step_s']} s is {ratio:.2f} x the profile's"
counts = {got[(e, "ddp")]["grad_elements"] for e in engines}
assert len(counts) == 1, f"the engines reduced different gradient sizes: {counts}"
print(f"OK: {len(rows)} rows; " + "; ".join(
    f"{e}/{m} eff {r['efficiency']:.3f} exposed {r['exposed_comm_s']:.4f} s"
    for (e, m), r in sorted(got.items())))
PY
