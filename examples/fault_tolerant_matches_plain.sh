#!/usr/bin/env bash
# examples.train_gpt.gloo.fault_tolerant_matches_plain
# (fault_tolerant_tests.cmake): without failures, train_gpt --fault-tolerant
# trains what the plain loop trains (Note [Fault-tolerant GPT trainer]: the
# same windows in the same micro-batches, the same loss, recipe and lr), so
# both runs end with the same validation loss, up to float rounding (the
# losses are summed in another order), and the same step count.
#   fault_tolerant_matches_plain.sh DDPRUN TRAIN_GPT WORK [ARGS...]
# runs `ddprun --nproc-per-node 2 TRAIN_GPT --backend gloo ARGS` and
# `ddprun --nproc-per-node 2:2 TRAIN_GPT --fault-tolerant ARGS`.
set -uo pipefail
ddprun=$1 train=$2 work=$3
shift 3
rm -rf "$work" && mkdir -p "$work"
"$ddprun" --nproc-per-node 2 --master-port 0 "$train" --backend gloo "$@" > "$work/plain.log" 2>&1 ||
  { cat "$work/plain.log"; echo "FAIL: the plain run failed"; exit 1; }
"$ddprun" --nproc-per-node 2:2 --master-port 0 "$train" --fault-tolerant "$@" > "$work/ft.log" 2>&1 ||
  { cat "$work/ft.log"; echo "FAIL: the fault-tolerant run failed"; exit 1; }
last_json() { grep '^\[[0-9]*\]: {' "$1" | tail -n 1 | sed -E 's/^\[[0-9]+\]: //'; }
/usr/bin/python3 - "$(last_json "$work/plain.log")" "$(last_json "$work/ft.log")" <<'PY'
import json, math, sys
plain, ft = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"plain: val_loss {plain['val_loss']} after {plain['steps']} steps")
print(f"fault-tolerant: val_loss {ft['val_loss']} after {ft['steps']} steps")
if plain["steps"] != ft["steps"]:
    sys.exit("FAIL: the step counts differ")
if not math.isclose(plain["val_loss"], ft["val_loss"], rel_tol=1e-4):
    sys.exit("FAIL: the validation losses differ by more than 1e-4 (relative)")
print("PASS")
PY
