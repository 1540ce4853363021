#!/usr/bin/env bash
# Kill test of a fault-tolerant trainer (examples/fault_tolerant_tests.cmake;
# docs/fault_tolerance.md): RANKS workers under `ddprun --nproc-per-node
# LOW:RANKS`, the worker of slot VICTIM SIGKILLed once training has begun
# (the first per-commit line is in the metrics file, as in
# benchmarks/chaos/run.sh). The survivors must heal, ddprun's replacement
# must join, and the job must finish with exit 0, with every replica check
# "identical" (at least two: after the heal and after the join), and a last
# stdout line that is a JSON object holding KEYS, with heals >= 1 and
# joins >= 1.
#   fault_tolerant_kill.sh --ddprun PATH --work DIR [--ranks 3] [--low 2]
#       [--victim 0] [--timeout 500] [--keys "k1 k2"] -- TRAINER [ARGS...]
# The trainer gets --fault-tolerant --check-replicas --metrics DIR/commits.jsonl
# added. Every wait polls a condition with a deadline, never a fixed sleep,
# so a loaded machine only makes it slower.
set -uo pipefail

DDPRUN="" WORK="" RANKS=3 LOW=2 VICTIM=0 TIMEOUT=500 KEYS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ddprun) DDPRUN=$2; shift ;;
    --work) WORK=$2; shift ;;
    --ranks) RANKS=$2; shift ;;
    --low) LOW=$2; shift ;;
    --victim) VICTIM=$2; shift ;;
    --timeout) TIMEOUT=$2; shift ;;
    --keys) KEYS=$2; shift ;;
    --) shift; break ;;
    *) echo "fault_tolerant_kill.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$DDPRUN" ] && [ -n "$WORK" ] && [ $# -ge 1 ] ||
  { echo "usage: fault_tolerant_kill.sh --ddprun PATH --work DIR [...] -- TRAINER [ARGS...]" >&2; exit 2; }

rm -rf "$WORK"
mkdir -p "$WORK"
OUT=$WORK/stdout.log ERR=$WORK/stderr.log COMMITS=$WORK/commits.jsonl
fail() {
  echo "FAIL: $*" >&2
  echo "---- stdout" >&2; cat "$OUT" >&2
  echo "---- stderr" >&2; cat "$ERR" >&2
  exit 1
}
deadline=$((SECONDS + TIMEOUT))

"$DDPRUN" --nproc-per-node "$LOW:$RANKS" --master-port 0 "$@" --fault-tolerant --check-replicas \
  --metrics "$COMMITS" > "$OUT" 2> "$ERR" &
pid=$!
# Stops the job if this script ends early (a failed check, the timeout).
trap 'kill -INT "$pid" 2>/dev/null || true' EXIT

# The worker of a slot: ddprun's child whose environment says RANK=slot.
worker_of_slot() {
  local w
  for w in $(pgrep -P "$pid" || true); do
    if tr '\0' '\n' < "/proc/$w/environ" 2>/dev/null | grep -qx "RANK=$1"; then
      echo "$w"
      return 0
    fi
  done
  return 1
}

# ddprun's line for each worker that died; only the victim may have one, so
# a crashing trainer fails the test now rather than at the deadline.
failures() { grep -c 'failed with' "$ERR" || true; }

# 1. Training has begun: a commit is on record.
while [ ! -s "$COMMITS" ]; do
  kill -0 "$pid" 2>/dev/null || fail "the job ended before its first commit"
  [ "$(failures)" = 0 ] || fail "a worker died before the kill"
  [ "$SECONDS" -lt "$deadline" ] || fail "no commit within ${TIMEOUT}s"
  sleep 0.2
done
# 2. SIGKILL the victim.
victim=""
until victim=$(worker_of_slot "$VICTIM"); do
  kill -0 "$pid" 2>/dev/null || fail "the job ended before the kill"
  [ "$SECONDS" -lt "$deadline" ] || fail "no worker in slot $VICTIM within ${TIMEOUT}s"
  sleep 0.2
done
kill -KILL "$victim" || fail "could not kill worker $victim"
echo "killed the worker of slot $VICTIM (pid $victim) after $(wc -l < "$COMMITS") commit(s)"
# 3. The job finishes.
while kill -0 "$pid" 2>/dev/null; do
  [ "$SECONDS" -lt "$deadline" ] || fail "the job did not finish within ${TIMEOUT}s"
  [ "$(failures)" -le 1 ] || fail "a worker other than the victim died"
  sleep 0.5
done
rc=0
wait "$pid" || rc=$?
trap - EXIT
cat "$OUT"
[ "$rc" = 0 ] || fail "ddprun exited $rc"

identical=$(grep -c 'replicas: identical' "$OUT" || true)
! grep -q 'replicas: DIFFER' "$OUT" || fail "replicas differ after a membership change"
! grep -q 'replicas: not checked' "$OUT" || fail "a replica check did not run"
grep -q 'joined at step' "$OUT" ||
  fail "the replacement never joined (the job ended first: give it more steps)"
[ "$identical" -ge 2 ] || fail "$identical replica check(s), want one after the heal and one after the join"

# The last stdout line (ddprun prefixes "[rank]: ") is the trainer's JSON.
last=$(grep -v '^[[:space:]]*$' "$OUT" | tail -n 1 | sed -E 's/^\[[0-9]+\]: //')
/usr/bin/python3 - "$last" $KEYS <<'EOF' || fail "the last stdout line is not the expected JSON"
import json, sys
line, keys = sys.argv[1], sys.argv[2:]
obj = json.loads(line)
missing = [k for k in keys if k not in obj]
if missing:
    sys.exit(f"missing keys {missing} in {line}")
if obj.get("heals", 0) < 1 or obj.get("joins", 0) < 1:
    sys.exit(f"want heals >= 1 and joins >= 1: {line}")
EOF
echo "PASS: killed slot $VICTIM, $identical replica checks identical, exit 0"
