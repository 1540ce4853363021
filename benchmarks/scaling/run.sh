#!/bin/bash
# The shaped-network scaling benchmark: N ranks on one machine, each in its
# own network namespace, joined through veth pairs to a bridge, every link
# shaped with tc's token bucket filter (tbf) to R Gbit/s in both directions.
# Runs libddp (scaling_main) and the PyTorch 1.13 gloo twin (torch_twin.py)
# on the same model, batch and links; prints per N images/s, the speedup
# over N = 1 and the scaling efficiency (DDP throughput / the same ranks'
# throughput under no_sync). Usage and results: docs/benchmarks.md.
#
#   benchmarks/scaling/run.sh [--nodes 1,2,4] [--gbit R] [--steps S] [--json FILE]
#       [--warmup W] [--batch-size B] [--image-size I] [--bucket-caps 1,5,100]
#       [--engines libddp,pytorch] [--modes ddp,no_comm,auto_buckets,zero1,zero1_overlap,powersgd,bf16,fp16,overlap]
#       [--main PATH/scaling_main] [--python /usr/bin/python3]
#       [--compute real|emulated] [--profile resnet50|gpt2|FILE]
#       [--cluster-link-gbit G] [--stretch S] [--priority-buckets K]
#       [--overlap-cap-mb C] [--overlap-chunk-mb M] [--overlap-issue-ratio R]
#       [--trace-dir D]
#
# Modes bf16, fp16: DDP with the compression hook (libddp's bf16/fp16_compress_hook,
# PyTorch's default_hooks.fp16_compress_hook; torch 1.13's gloo has no bf16).
# --trace-dir D (emulated): rank 0 of each libddp run writes its last timed
# step as a Chrome trace, D/<row>.trace.json (scaling_main --trace).
# Mode overlap (libddp only): DistributedDataParallel::overlap_step with K
# priority buckets (default 4) and buckets of C MiB (default 25); with M > 0
# each bucket goes out as allreduces of at most M MiB, R of the bytes ready
# during backward (0 < R <= 1, default 1) and the rest at its end, first
# layers first (default M = 0: whole buckets; docs/ddp.md).
#
# --compute emulated (the GPU-regime twin, docs/benchmarks.md "GPU-regime
# twin"): the model is the profile's layers (benchmarks/scaling/profiles/),
# which sleep the profile's times x S while real gradients of the real
# sizes go through DDP; the links are shaped to G / S Gbit/s (G default 25,
# S default G / 2.5, so the shaped links run at 2.5 Gbit/s), and the rows
# are in the emulated cluster's time. Modes ddp, no_comm, auto_buckets,
# bf16, fp16, overlap.
#
# Needs root (ip netns, tc). Exits 77 where namespaces cannot be made. The
# namespaces are removed on exit, also on Ctrl-C or a kill (trap).
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

nodes=1,2,4 gbit=1 steps=10 warmup=3 batch=32 image=32 json="" caps=""
engines=libddp,pytorch modes=ddp,no_comm,auto_buckets,zero1,powersgd
main=$repo/build/benchmarks/scaling/scaling_main python=/usr/bin/python3
compute=real profile="" cluster_gbit="" stretch="" gbit_given="" modes_given=""
cluster_given="" stretch_given="" priority=4 overlap_cap=25 chunk_mb=0 issue_ratio=1 trace_dir=""
usage() { sed -n '9,29p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) nodes=$2; shift 2 ;;
    --gbit) gbit=$2; gbit_given=1; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --batch-size) batch=$2; shift 2 ;;
    --image-size) image=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    --bucket-caps) caps=$2; shift 2 ;;
    --engines) engines=$2; shift 2 ;;
    --modes) modes=$2; modes_given=1; shift 2 ;;
    --compute) compute=$2; shift 2 ;;
    --profile) profile=$2; shift 2 ;;
    --cluster-link-gbit) cluster_gbit=$2; cluster_given=1; shift 2 ;;
    --stretch) stretch=$2; stretch_given=1; shift 2 ;;
    --priority-buckets) priority=$2; shift 2 ;;
    --overlap-cap-mb) overlap_cap=$2; shift 2 ;;
    --overlap-chunk-mb) chunk_mb=$2; shift 2 ;;
    --overlap-issue-ratio) issue_ratio=$2; shift 2 ;;
    --trace-dir) trace_dir=$2; shift 2 ;;
    --main) main=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "run.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
# positive_number FLAG VALUE: exits 2 naming FLAG unless VALUE is a number > 0
positive_number() {
  case $2 in ''|.|*[!0-9.]*|*.*.*) echo "run.sh: $1 must be a positive number, got '$2'" >&2; exit 2 ;; esac
  awk -v v="$2" 'BEGIN { exit !(v > 0) }' || { echo "run.sh: $1 must be a positive number, got '$2'" >&2; exit 2; }
}
case $priority in ''|*[!0-9]*|0) echo "run.sh: --priority-buckets must be a positive integer, got '$priority'" >&2; exit 2 ;; esac
positive_number --overlap-cap-mb "$overlap_cap"
case $chunk_mb in ''|.|*[!0-9.]*|*.*.*) echo "run.sh: --overlap-chunk-mb must be a number >= 0, got '$chunk_mb'" >&2; exit 2 ;; esac
case $issue_ratio in ''|.|*[!0-9.]*|*.*.*) echo "run.sh: --overlap-issue-ratio must be in (0, 1], got '$issue_ratio'" >&2; exit 2 ;; esac
awk -v v="$issue_ratio" 'BEGIN { exit !(v > 0 && v <= 1) }' || { echo "run.sh: --overlap-issue-ratio must be in (0, 1], got '$issue_ratio'" >&2; exit 2; }
case $gbit in ''|*[!0-9.]*) echo "run.sh: --gbit must be a number, got '$gbit'" >&2; exit 2 ;; esac
case $compute in
  real)
    [ -z "$profile" ] || { echo "run.sh: --profile needs --compute emulated" >&2; exit 2; }
    [ -z "$cluster_given$stretch_given" ] || { echo "run.sh: --cluster-link-gbit and --stretch need --compute emulated" >&2; exit 2; }
    [ -z "$trace_dir" ] || { echo "run.sh: --trace-dir needs --compute emulated" >&2; exit 2; }
    cluster_gbit=$gbit stretch=1 ;;
  emulated)
    [ -n "$profile" ] || { echo "run.sh: --compute emulated needs --profile resnet50|gpt2|FILE" >&2; exit 2; }
    [ -z "$gbit_given" ] || { echo "run.sh: --gbit is cluster-link-gbit / stretch with --compute emulated; give --cluster-link-gbit (and --stretch)" >&2; exit 2; }
    case $profile in
      */*|*.json) profile_file=$profile ;;
      *) profile_file=$here/profiles/$profile.json
         [ -f "$profile_file" ] || { echo "run.sh: --profile: unknown profile '$profile' (resnet50, gpt2, or a JSON file)" >&2; exit 2; } ;;
    esac
    [ -r "$profile_file" ] && [ -f "$profile_file" ] || { echo "run.sh: --profile: cannot read '$profile_file'" >&2; exit 2; }
    [ -n "$cluster_given" ] || cluster_gbit=25
    positive_number --cluster-link-gbit "$cluster_gbit"
    if [ -n "$stretch_given" ]; then
      positive_number --stretch "$stretch"
    else
      stretch=$(awk -v g="$cluster_gbit" 'BEGIN { s = g / 2.5; if (s < 1) s = 1; printf "%g", s }')
    fi
    gbit=$(awk -v g="$cluster_gbit" -v s="$stretch" 'BEGIN { printf "%g", g / s }')
    # The same checks both engines make, before any namespace exists.
    "$python" - "$profile_file" <<'PY' || exit 2
import json, sys
path = sys.argv[1]
try:
    with open(path) as f:
        p = json.load(f)
    assert isinstance(p, dict), "the top level must be an object"
    for k in ("name", "sample", "samples_per_step", "step_s", "optimizer_s", "layers"):
        assert k in p, f'no key "{k}"'
    assert isinstance(p["layers"], list) and p["layers"], '"layers" must be a non-empty list'
    for l in p["layers"]:
        for k in ("name", "params", "forward_s", "backward_s"):
            assert isinstance(l, dict) and k in l, f'a layer without "{k}"'
except (OSError, ValueError, AssertionError) as e:
    print(f"run.sh: --profile: {path}: {e}", file=sys.stderr)
    sys.exit(2)
PY
    profile_name=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["name"])' "$profile_file")
    [ -n "$modes_given" ] || modes=ddp,no_comm ;;
  *) echo "run.sh: --compute must be real or emulated, got '$compute'" >&2; exit 2 ;;
esac
if [ -n "$trace_dir" ]; then
  mkdir -p "$trace_dir" 2>/dev/null && [ -d "$trace_dir" ] && [ -w "$trace_dir" ] ||
    { echo "run.sh: --trace-dir: cannot write to '$trace_dir'" >&2; exit 2; }
  trace_dir=$(cd "$trace_dir" && pwd)
fi
for n in ${nodes//,/ }; do
  case $n in ''|*[!0-9]*|0) echo "run.sh: --nodes takes positive integers, got '$n'" >&2; exit 2 ;; esac
done
skip() { echo "SKIP: $*"; exit 77; }
[[ ",$engines," == *,libddp,* ]] && { [ -x "$main" ] || { echo "run.sh: no scaling_main at $main (build it, or pass --main)" >&2; exit 2; }; }
command -v ip >/dev/null 2>&1 || skip "no ip(8) command"
command -v tc >/dev/null 2>&1 || skip "no tc(8) command"
[ "$(id -u)" = 0 ] || skip "network namespaces need root"

max_n=0
for n in ${nodes//,/ }; do [ "$n" -gt "$max_n" ] && max_n=$n; done

# ---- namespaces: hub (the bridge) and one per rank -------------------------
tag=$$
hub=ddpHub$tag
subnet=10.233.$((tag % 250 + 1))
work=$(mktemp -d /tmp/ddp_scaling.XXXXXX)
declare -a spaces=() pids=()
cleanup() {
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
  for s in "${spaces[@]:-}"; do [ -n "$s" ] && ip netns del "$s" 2>/dev/null; done
  ip netns del "$hub" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ip netns add "$hub" 2>/dev/null || skip "cannot create a network namespace (ip netns add failed)"
ip -n "$hub" link add br0 type bridge || skip "cannot create a bridge"
ip -n "$hub" link set br0 up
# tbf: R Gbit/s; a burst of 256 KiB (above the 64 KiB segments veth's
# offloads make) and up to 50 ms of queue.
shape() { tc -n "$1" qdisc add dev "$2" root tbf rate "${gbit}gbit" burst 256kb latency 50ms; }
for ((i = 0; i < max_n; i++)); do
  ns=ddpR${i}_$tag
  ip netns add "$ns" || skip "cannot create namespace $ns"
  spaces+=("$ns")
  ip link add "h${i}_$tag" type veth peer name "r${i}_$tag" || skip "cannot create a veth pair"
  ip link set "h${i}_$tag" netns "$hub" && ip link set "r${i}_$tag" netns "$ns" || skip "cannot move veth ends"
  ip -n "$hub" link set "h${i}_$tag" master br0 up
  ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev "r${i}_$tag"
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "r${i}_$tag" up
  shape "$ns" "r${i}_$tag" || skip "tc tbf not permitted here"   # what the rank sends
  shape "$hub" "h${i}_$tag" || skip "tc tbf not permitted here"  # what it receives
done
echo "# $max_n namespaces on bridge $hub, links shaped to $gbit Gbit/s (tbf), rank i at $subnet.(i+1)"
[ "$compute" = emulated ] && echo "# emulated compute: profile $profile_name ($profile_file), cluster link $cluster_gbit Gbit/s, time stretch $stretch"

# ---- one run: N ranks of one engine and mode ------------------------------
port=29700
rows=$work/rows
mkdir -p "$rows"
failed=0
# run_one N ENGINE MODE CAP TAG
run_one() {
  local n=$1 engine=$2 mode=$3 cap=$4 name=$5 i rc status=0 out
  port=$((port + 1))
  out=$rows/$name.json
  pids=()
  for ((i = 0; i < n; i++)); do
    local cmd
    if [ "$engine" = libddp ]; then
      cmd=("$main" --mode "$mode")
      [ "$compute" = real ] && cmd+=(--model resnet18)
      [ "$mode" = overlap ] && cmd+=(--priority-buckets "$priority" --overlap-chunk-mb "$chunk_mb"
                                     --overlap-issue-ratio "$issue_ratio")
    else
      cmd=("$python" "$here/torch_twin.py" --mode "$mode")
    fi
    cmd+=(--steps "$steps" --warmup "$warmup" --bucket-cap-mb "$cap"
          --compute "$compute" --cluster-link-gbit "$cluster_gbit" --link-gbit "$gbit")
    if [ "$compute" = emulated ]; then
      cmd+=(--profile "$profile_file" --stretch "$stretch")
    else
      cmd+=(--image-size "$image" --batch-size "$batch")
    fi
    [ "$i" = 0 ] && cmd+=(--json "$out")
    [ "$i" = 0 ] && [ -n "$trace_dir" ] && [ "$engine" = libddp ] &&
      cmd+=(--trace "$trace_dir/$name.trace.json")
    ip netns exec "${spaces[$i]}" env RANK=$i WORLD_SIZE=$n LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
      MASTER_ADDR="$subnet.1" MASTER_PORT=$port GLOO_SOCKET_IFNAME="r${i}_$tag" \
      OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 DDP_LOG_LEVEL=info \
      timeout 900 "${cmd[@]}" > "$work/$name.$i.log" 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < n; i++)); do
    wait "${pids[$i]}"; rc=$?
    [ $rc -ne 0 ] && [ $status -eq 0 ] && status=$rc
  done
  pids=()
  grep -h "auto_bucket_size chose" "$work/$name.0.log" | sed 's/^/#   /'
  if [ $status -ne 0 ]; then
    echo "# $name: FAILED (exit $status); rank logs:"
    for ((i = 0; i < n; i++)); do echo "## rank $i"; tail -20 "$work/$name.$i.log"; done
    failed=1
    rm -f "$out"
  else
    grep -hE "^(scaling_main|torch_twin): " "$work/$name.0.log" | sed 's/^/#   /'
  fi
}

for n in ${nodes//,/ }; do
  for engine in ${engines//,/ }; do
    for mode in ${modes//,/ }; do
      [ "$engine" = pytorch ] && [ "$mode" != ddp ] && [ "$mode" != no_comm ] && [ "$mode" != fp16 ] && continue
      if [ "$compute" = emulated ] && { [ "$mode" = zero1 ] || [ "$mode" = zero1_overlap ] || [ "$mode" = powersgd ]; }; then
        echo "# n${n}_${engine}_${mode}: skipped (not available with --compute emulated)"
        continue
      fi
      cap=25
      [ "$mode" = overlap ] && cap=$overlap_cap
      run_one "$n" "$engine" "$mode" "$cap" "n${n}_${engine}_${mode}"
    done
    [ "$engine" = libddp ] || continue
    for cap in ${caps//,/ }; do
      run_one "$n" libddp ddp "$cap" "n${n}_${engine}_cap${cap}"
    done
  done
done

"$python" "$here/report.py" "$rows" --gbit "$gbit" ${json:+--json "$json"} || failed=1
exit $failed
