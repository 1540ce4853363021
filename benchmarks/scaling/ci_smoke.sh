#!/bin/bash
# CI smoke test of the scaling benchmark (ctest bench.scaling.netns_np2):
# run.sh at N = 2 for a few steps of a small batch, then the JSON rows are
# checked: every mode present, with numbers. Exits 77 (a skip) where run.sh cannot make
# namespaces; the PyTorch twin runs where /usr/bin/python3 has torch.
#
#   ci_smoke.sh SCALING_MAIN JSON
set -u
here=$(cd "$(dirname "$0")" && pwd)
main=$1 json=$2
python=/usr/bin/python3
engines=libddp
"$python" -c "import torch" 2>/dev/null && engines=libddp,pytorch || echo "note: no torch in $python; libddp only"
rm -f "$json"
"$here/run.sh" --nodes 2 --gbit 1 --steps 2 --warmup 1 --batch-size 4 --engines "$engines" \
  --main "$main" --json "$json"
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "FAIL: run.sh exited $rc"; exit 1; }
"$python" - "$json" "$engines" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
engines = sys.argv[2].split(",")
want = {("libddp", m) for m in ["ddp", "no_comm", "auto_buckets", "zero1", "powersgd"]}
if "pytorch" in engines:
    want |= {("pytorch", "ddp"), ("pytorch", "no_comm")}
got = {(r["engine"], r["mode"]): r for r in rows if r["nodes"] == 2}
missing = want - set(got)
assert not missing, f"rows missing: {sorted(missing)}"
for (engine, mode), r in got.items():
    for k in ("nodes", "engine", "mode", "images_per_s", "efficiency"):
        assert k in r, f"{engine}/{mode}: no key {k}"
    assert r["images_per_s"] > 0, f"{engine}/{mode}: images_per_s {r['images_per_s']}"
    assert 0 < r["efficiency"] < 10, f"{engine}/{mode}: efficiency {r['efficiency']}"
assert got[("libddp", "no_comm")]["efficiency"] == 1.0
print(f"OK: {len(rows)} rows")
PY
