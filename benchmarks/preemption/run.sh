#!/usr/bin/env bash
# Preemption trials (issue 26 item 3; docs/benchmarks.md, "Preemption"):
# a 2-rank train_resnet job under ddprun gets SIGTERM at a random moment
# (start-up, a step, a checkpoint write, an evaluation), must exit 0 with a
# checkpoint, and a --resume run from it must end with the same model and
# optimizer state, bit for bit, as a run never interrupted.
#
#   benchmarks/preemption/run.sh [--build-dir build] [--trials 20] [--seed 1] [--work DIR]
#
# One reference run trains --steps steps straight and saves its final
# checkpoint. Each trial starts the same job with --checkpoint-every 4
# --async-checkpoint (so that some signals land in a background write),
# sends SIGTERM to ddprun after a random delay in [0.25, 1.1] x the
# reference's duration (not earlier: a signal before a worker has joined the
# job and made its watcher ends that worker with the signal's default action,
# an unclean stop; docs/checkpoints.md, "Preemption"), expects exit status 0, then resumes to --steps
# (when the job was stopped early) and compares the final model and
# optimizer section files byte for byte with the reference's. Prints a line
# per trial and a summary; exit 0 only when every trial was clean.
set -euo pipefail

BUILD=build TRIALS=20 SEED=1 STEPS=48 WORK=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD=$2; shift ;;
    --trials) TRIALS=$2; shift ;;
    --seed) SEED=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --work) WORK=$2; shift ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[[ "$TRIALS" =~ ^[0-9]+$ && "$TRIALS" -ge 1 ]] || { echo "run.sh: --trials must be >= 1" >&2; exit 2; }
DDPRUN=$BUILD/tools/ddprun/ddprun
TRAIN=$BUILD/examples/train_resnet
for p in "$DDPRUN" "$TRAIN"; do [ -x "$p" ] || { echo "run.sh: $p is not built" >&2; exit 2; }; done
[ -n "$WORK" ] || WORK=$(mktemp -d /tmp/ddp_preemption.XXXXXX)
mkdir -p "$WORK"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# synthetic 32x32 images, 512 per epoch: an evaluation every 8 steps at batch 64
ARGS=(--data synthetic --synthetic-size 512 --batch-size 64 --eval-limit 256 --log-every 1
      --workers 1 --backend gloo --epochs $(((STEPS + 7) / 8)) --max-steps "$STEPS")
job() { "$DDPRUN" --nproc-per-node 2 --master-port 0 "$TRAIN" "${ARGS[@]}" "$@"; }
# In the background, as the launcher itself (so that $! is ddprun's pid).
job_in_background() { exec "$DDPRUN" --nproc-per-node 2 --master-port 0 "$TRAIN" "${ARGS[@]}" "$@"; }
same_state() {  # the final model and optimizer sections of two checkpoints, byte for byte
  local a=$1 b=$2 s fa fb
  for s in model optimizer; do
    fa=$(ls "$a"/$s.g*.safetensors) fb=$(ls "$b"/$s.g*.safetensors)
    cmp -s "$fa" "$fb" || return 1
  done
}

now() { date +%s.%N; }
start=$(now)
job --checkpoint-dir "$WORK/reference" > "$WORK/reference.log" 2>&1 ||
  { echo "run.sh: the reference run failed ($WORK/reference.log)" >&2; exit 1; }
ref_s=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
printf '# preemption trials: %d, reference run %.1f s (%d steps), work %s\n' "$TRIALS" "$ref_s" "$STEPS" "$WORK"
printf '# %5s %8s %6s %10s %10s %s\n' trial delay_s rc stopped_at resumed same_state
RANDOM=$SEED
clean=0
for ((i = 1; i <= TRIALS; i++)); do
  dir=$WORK/trial$i
  rm -rf "$dir"
  delay=$(awk -v r="$RANDOM" -v t="$ref_s" 'BEGIN { printf "%.2f", t * (0.25 + r / 32767 * 0.85) }')
  job_in_background --checkpoint-dir "$dir" --checkpoint-every 4 --async-checkpoint \
    > "$WORK/trial$i.log" 2>&1 &
  pid=$!
  sleep "$delay"
  kill -TERM "$pid" 2>/dev/null || true
  rc=0; wait "$pid" || rc=$?
  stopped=$(grep -o 'every rank stopped at step [0-9]*' "$WORK/trial$i.log" | grep -o '[0-9]*$' || true)
  [ -n "$stopped" ] || stopped=end
  resumed=no same=no
  if [ "$rc" = 0 ] && [ -f "$dir/checkpoint.json" ]; then
    if [ "$stopped" != end ]; then
      job --checkpoint-dir "$dir" --resume > "$WORK/trial$i.resume.log" 2>&1 && resumed=yes
    else
      resumed=not-needed
    fi
    [ "$resumed" != no ] && same_state "$WORK/reference" "$dir" && same=yes
  fi
  [ "$same" = yes ] && clean=$((clean + 1))
  printf '  %5d %8s %6s %10s %10s %s\n' "$i" "$delay" "$rc" "$stopped" "$resumed" "$same"
done
echo "# clean: $clean of $TRIALS (exit 0, a checkpoint, and after --resume the reference's final state byte for byte)"
[ "$clean" = "$TRIALS" ]
