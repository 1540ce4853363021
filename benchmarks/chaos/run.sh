#!/usr/bin/env bash
# Chaos run (issue 26; docs/benchmarks.md, "Chaos run"): train_resnet on gloo
# under ddprun while a random worker is killed with SIGKILL every MIN-MAX
# seconds, in three modes run back to back on the same job:
#   none     fault-tolerant trainer, nobody killed (the reference)
#   ft       fault-tolerant trainer under `ddprun --nproc-per-node LOW:RANKS`:
#            survivors heal, ddprun replaces the dead worker, which joins
#   restart  the plain trainer under `ddprun --max-restarts`: every worker
#            restarts from the last checkpoint (--checkpoint-every)
# Each mode trains the same epochs; goodput = the images of those epochs /
# the run's wall time. For ft: the time from each kill to the next committed
# step (from the trainer's per-commit lines), p50 and p99; the replica checks
# after each membership change; the final test accuracy.
#   benchmarks/chaos/run.sh [--build-dir build] [--ranks 4] [--low 3]
#       [--epochs 6] [--kill-every 30:60] [--modes none,ft,restart]
#       [--batch 128] [--seed 1] [--work DIR] [--max-kills N] [--require-kills N]
#       [--trainer-args "..."]
# Prints one line per kill and a summary per mode; exits non-zero when a run
# failed, hung (past 4x the reference's time) or a replica check differed.
set -euo pipefail

BUILD=build RANKS=4 LOW=3 EPOCHS=6 KILL=30:60 MODES=none,ft,restart SEED=1 WORK="" MAX_KILLS=1000
EXTRA="" BATCH=128 REQUIRE_KILLS=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD=$2; shift ;;
    --ranks) RANKS=$2; shift ;;
    --low) LOW=$2; shift ;;
    --epochs) EPOCHS=$2; shift ;;
    --kill-every) KILL=$2; shift ;;
    --modes) MODES=$2; shift ;;
    --seed) SEED=$2; shift ;;
    --work) WORK=$2; shift ;;
    --max-kills) MAX_KILLS=$2; shift ;;
    --require-kills) REQUIRE_KILLS=$2; shift ;;
    --batch) BATCH=$2; shift ;;
    --trainer-args) EXTRA=$2; shift ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
KMIN=${KILL%%:*} KMAX=${KILL##*:}
[[ "$KMIN" =~ ^[0-9.]+$ && "$KMAX" =~ ^[0-9.]+$ ]] || { echo "run.sh: --kill-every MIN:MAX" >&2; exit 2; }
[[ "$RANKS" =~ ^[0-9]+$ && "$LOW" =~ ^[0-9]+$ && "$LOW" -ge 1 && "$LOW" -le "$RANKS" ]] ||
  { echo "run.sh: need 1 <= --low <= --ranks" >&2; exit 2; }
DDPRUN=$BUILD/tools/ddprun/ddprun
TRAIN=$BUILD/examples/train_resnet
for p in "$DDPRUN" "$TRAIN"; do [ -x "$p" ] || { echo "run.sh: $p is not built" >&2; exit 2; }; done
[ -n "$WORK" ] || WORK=$(mktemp -d /tmp/ddp_chaos.XXXXXX)
mkdir -p "$WORK"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# shellcheck disable=SC2206
ARGS=(--model resnet20 --data fashion-mnist --batch-size "$BATCH" --epochs "$EPOCHS" --workers 1
      --backend gloo --log-every 50 $EXTRA)

now() { date +%s.%N; }
RANDOM=$SEED

# Runs one mode; sets RC, WALL, LOG. Kills while it runs when $2 = kill.
run_mode() {
  local mode=$1 kills=$2 dir=$WORK/$1 start pid next n=0 victim
  rm -rf "$dir"; mkdir -p "$dir"
  LOG=$dir/run.log
  : > "$dir/kills"
  start=$(now)
  case "$mode" in
    none|ft)
      # As many replacements as kills: the run measures healing, not the cap.
      "$DDPRUN" --nproc-per-node "$LOW:$RANKS" --max-replacements 1000 --master-port 0 "$TRAIN" "${ARGS[@]}" \
        --fault-tolerant --check-replicas --metrics "$dir/commits.jsonl" > "$LOG" 2>&1 & ;;
    restart)
      "$DDPRUN" --nproc-per-node "$RANKS" --master-port 0 --max-restarts 1000 "$TRAIN" "${ARGS[@]}" \
        --checkpoint-dir "$dir/ckpt" --checkpoint-every 50 --resume > "$LOG" 2>&1 & ;;
  esac
  pid=$!
  local limit=${HANG_LIMIT:-100000}
  next=$(awk -v a="$KMIN" -v b="$KMAX" -v r="$RANDOM" 'BEGIN { printf "%.2f", a + (b - a) * r / 32767 }')
  local t=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.5
    t=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
    if awk -v t="$t" -v l="$limit" 'BEGIN { exit !(t > l) }'; then
      echo "run.sh: $mode hung past ${limit}s; stopping it" >&2
      kill -INT "$pid" 2>/dev/null || true
      break
    fi
    # The fault-tolerant modes are killed once training has begun (a commit
    # is on record), so that every kill is healed and checked.
    if [ "$kills" = kill ] && [ "$n" -lt "$MAX_KILLS" ] &&
       { [ "$mode" = restart ] || [ -s "$dir/commits.jsonl" ]; } &&
       awk -v t="$t" -v n="$next" 'BEGIN { exit !(t >= n) }'; then
      # A random worker of ddprun (its children are the workers' process groups).
      mapfile -t workers < <(pgrep -P "$pid" || true)
      if [ "${#workers[@]}" -gt 0 ]; then
        victim=${workers[$((RANDOM % ${#workers[@]}))]}
        if kill -KILL "$victim" 2>/dev/null; then
          n=$((n + 1))
          printf '%s %s\n' "$(date +%s.%N)" "$victim" >> "$dir/kills"
        fi
      fi
      next=$(awk -v t="$t" -v a="$KMIN" -v b="$KMAX" -v r="$RANDOM" \
        'BEGIN { printf "%.2f", t + a + (b - a) * r / 32767 }')
    fi
  done
  RC=0; wait "$pid" || RC=$?
  WALL=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
}

summary() {
  local mode=$1 dir=$WORK/$1 acc kills
  acc=$(grep -o '"test_accuracy": *[0-9.eE+-]*' "$LOG" | tail -1 | grep -o '[0-9.eE+-]*$' || echo nan)
  kills=$(wc -l < "$dir/kills")
  local images
  images=$(awk -v e="$EPOCHS" 'BEGIN { print e * 60000 }')
  printf '%-8s rc %3s  wall %8.1f s  kills %3s  goodput %8.1f img/s  test accuracy %s\n' \
    "$mode" "$RC" "$WALL" "$kills" "$(awk -v i="$images" -v w="$WALL" 'BEGIN { print i / w }')" "$acc"
  if [ "$mode" = ft ] || [ "$mode" = none ]; then
    local checks differ
    checks=$(grep -c 'replicas: identical' "$LOG" || true)
    differ=$(grep -c 'replicas: DIFFER' "$LOG" || true)
    echo "         replica checks after membership changes: $checks identical, $differ differ"
    [ "$differ" = 0 ] || FAILED=1
    # Every kill is followed by a heal and a join, each checked.
    if [ "$mode" = ft ] && [ "$kills" -gt 0 ] && [ "$checks" -lt 1 ]; then FAILED=1; fi
  fi
  if [ "$mode" = ft ] && [ "$kills" -gt 0 ]; then
    # Seconds from each kill to the first commit after it.
    awk 'NR == FNR { k[++nk] = $1; next }
         { if (match($0, /"time": *[0-9.]+/)) { split(substr($0, RSTART, RLENGTH), a, ":"); c[++nc] = a[2] + 0 } }
         END {
           for (i = 1; i <= nk; ++i) {
             best = -1
             for (j = 1; j <= nc; ++j) if (c[j] > k[i]) { best = c[j] - k[i]; break }
             if (best >= 0) print best
           }
         }' "$dir/kills" "$dir/commits.jsonl" | sort -n > "$dir/recovery_s"
    awk '{ v[NR] = $1 } END {
           if (NR == 0) { print "         kill -> next commit: no data"; exit }
           p50 = v[int((NR - 1) * 0.5) + 1]; p99 = v[int((NR - 1) * 0.99) + 1]
           printf "         kill -> next commit: n %d  p50 %.2f s  p99 %.2f s  max %.2f s\n", NR, p50, p99, v[NR] }' \
      "$dir/recovery_s"
  fi
}

FAILED=0
echo "# chaos run: $RANKS ranks (low $LOW), resnet20 fashion-mnist, $EPOCHS epochs, a SIGKILL every $KMIN-$KMAX s; work $WORK"
REF_WALL=""
IFS=, read -r -a modes <<< "$MODES"
for mode in "${modes[@]}"; do
  [ -n "$REF_WALL" ] && HANG_LIMIT=$(awk -v w="$REF_WALL" 'BEGIN { print 4 * w + 120 }') || HANG_LIMIT=100000
  case "$mode" in
    none) run_mode none nokill; REF_WALL=$WALL ;;
    ft) run_mode ft kill ;;
    restart) run_mode restart kill ;;
    *) echo "run.sh: unknown mode $mode" >&2; exit 2 ;;
  esac
  summary "$mode"
  [ "$RC" = 0 ] || FAILED=1
  if [ "$mode" != none ] && [ "$(wc -l < "$WORK/$mode/kills")" -lt "$REQUIRE_KILLS" ]; then
    echo "run.sh: $mode: fewer kills than --require-kills $REQUIRE_KILLS (the run ended first)" >&2
    FAILED=1
  fi
done
exit "$FAILED"
