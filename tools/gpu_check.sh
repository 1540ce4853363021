#!/usr/bin/env bash
# One command that proves libddp's GPU side on a machine with one GPU
# (issue 15). From a clean checkout (and, on a machine without the Debian
# libraries, the bundle of tools/gpu_bundle.sh) it configures for sm_90,
# builds with every core, runs every GPU check with its own timeout, and
# writes OUTDIR/report.md: per step passed / failed / skipped with its time,
# the first lines of each failure, every figure, and the versions that ran
# (tools/ddp_info). Step logs land in OUTDIR/logs/.
#
#   tools/gpu_check.sh OUTDIR                 # on the GPU machine
#   tools/gpu_check.sh --dry-run OUTDIR       # anywhere: configure + build, GPU steps skipped
#   tools/gpu_check.sh --dry-run --no-build --build-dir build OUTDIR   # CI: an already-built tree
#   tools/gpu_check.sh --prebuilt PACK [--dry-run] OUTDIR   # the short GPU-window
#       check from tools/gpu_pack.sh's pack: no build there (tools/gpu_check/prebuilt.sh
#       has its own options; docs/gpu-runs.md)
#
# Options:
#   --dry-run          walk every step; those that need a GPU are skipped (after
#                      checking that what they would run was built)
#   --no-build         skip configure and build (use --build-dir's tree as it is)
#   --build-dir DIR    build tree (default: build-gpu in the checkout)
#   --bundle FILE      dependency bundle (default: .gpu/deps.tar.gz when present)
#   --deps-dir DIR     where the bundle is unpacked (default: /tmp/ddp-gpu-deps)
#   --jobs N           build jobs (default: every core)
#   --budget SECONDS   whole-run time limit (default 1500 = 25 min); a step never
#                      gets more than what is left, and none starts with < 20 s left
#   --build-timeout S  the build step's own limit (default 1200)
# Exit status: 0 when no step failed, 1 otherwise, 2 for a bad command line.
set -uo pipefail

usage() { sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
for a in "$@"; do [ "$a" = --prebuilt ] && exec bash "$(dirname "$0")/gpu_check/prebuilt.sh" "$@"; done

DRY_RUN=0 NO_BUILD=0 BUILD_DIR="" BUNDLE="" DEPS_DIR=/tmp/ddp-gpu-deps JOBS="" BUDGET=1500 OUT=""
BUILD_TIMEOUT=1200
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --no-build) NO_BUILD=1 ;;
    --build-dir) BUILD_DIR=${2:?--build-dir needs a folder}; shift ;;
    --bundle) BUNDLE=${2:?--bundle needs a file}; shift ;;
    --deps-dir) DEPS_DIR=${2:?--deps-dir needs a folder}; shift ;;
    --jobs) JOBS=${2:?--jobs needs a number}; shift ;;
    --budget) BUDGET=${2:?--budget needs seconds}; shift ;;
    --build-timeout) BUILD_TIMEOUT=${2:?--build-timeout needs seconds}; shift ;;
    -h|--help) usage 0 ;;
    -*) echo "gpu_check: unknown option $1" >&2; usage 2 ;;
    *) [ -z "$OUT" ] || { echo "gpu_check: one OUTDIR only" >&2; usage 2; }; OUT=$1 ;;
  esac
  shift
done
[ -n "$OUT" ] || { echo "gpu_check: OUTDIR is required" >&2; usage 2; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
BUILD_DIR=$(realpath -m "${BUILD_DIR:-$ROOT/build-gpu}")
mkdir -p "$OUT/logs" || exit 2
OUT=$(realpath "$OUT")
rm -f "$OUT/report.md" "$OUT"/logs/*  # written last: its presence says the run is over
JOBS=${JOBS:-$(nproc)}
[ -z "$BUNDLE" ] && [ -f .gpu/deps.tar.gz ] && BUNDLE=.gpu/deps.tar.gz
B=$BUILD_DIR
# The low-precision ResNet runs must end within this of the f32 run's final
# training loss (mean of the last 20 steps): after 300 steps the runs have
# taken different rounding paths, and 0.15 is about three times the spread
# of that mean between seeds of the f32 run.
RESNET_LOSS_TOL=${RESNET_LOSS_TOL:-0.15}

source "$ROOT/tools/gpu_check/common.sh"
HAVE_GPU=0 GPU_REASON="not checked yet"

# run_step ID NEEDS_GPU TIMEOUT_S "FILES IT RUNS" COMMAND
# Runs COMMAND with bash -c under `timeout`, its output in logs/ID.log. A GPU
# step in a dry run only checks that FILES exist; without a GPU (not a dry
# run) it fails, since proving the GPU paths is the point of this script.
run_step() {
  local id=$1 gpu=$2 limit=$3 files=$4 cmd=$5 f missing="" left start rc
  for f in $files; do [ -e "$f" ] || missing+=" ${f#"$ROOT"/}"; done
  if [ "$gpu" = 1 ] && [ "$DRY_RUN" = 1 ]; then
    if [ -n "$missing" ]; then record "$id" failed 0 "dry run: not built:$missing" "$cmd"
    else record "$id" skipped 0 "dry run: needs a GPU" "$cmd"; fi
    return 0
  fi
  if [ "$gpu" = 1 ] && [ "$HAVE_GPU" = 0 ]; then
    record "$id" failed 0 "no usable GPU: $GPU_REASON" "$cmd"; return 0
  fi
  if [ -n "$missing" ]; then record "$id" failed 0 "not built:$missing" "$cmd"; return 0; fi
  left=$((BUDGET - SECONDS))
  if [ "$left" -lt 20 ]; then record "$id" skipped 0 "over the ${BUDGET} s budget" "$cmd"; return 0; fi
  [ "$limit" -gt "$left" ] && limit=$left
  start=$SECONDS
  { echo "\$ $cmd"; echo; } > "$OUT/logs/$id.log"
  timeout --kill-after=15 "$limit" bash -c "$cmd" >> "$OUT/logs/$id.log" 2>&1
  rc=$?
  local took=$((SECONDS - start))
  if [ "$rc" = 0 ]; then record "$id" passed "$took" "" "$cmd"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then record "$id" failed "$took" "timed out after ${limit} s" "$cmd"
  else record "$id" failed "$took" "exit status $rc" "$cmd"; fi
}

# check_step ID "PREREQUISITE STEPS" DESCRIPTION -- a judgement on figures
# already taken: passes when `eval CONDITION` holds.
check_step() {
  local id=$1 needs=$2 what=$3 cond=$4 s
  for s in $needs; do
    if [ "$(result_of "$s")" != passed ]; then
      record "$id" skipped 0 "needs $s, which was $(result_of "$s")" "$what"; return 0
    fi
  done
  if eval "$cond"; then record "$id" passed 0 "$what" "$what"
  else record "$id" failed 0 "$what: does not hold" "$what"; fi
}

# ---- 1. the dependency bundle ---------------------------------------------------
export_bundle_paths() {
  local d=$DEPS_DIR/usr
  export CMAKE_PREFIX_PATH="$d${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$d/lib/x86_64-linux-gnu:$d/lib/x86_64-linux-gnu/openblas-pthread:$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  CMAKE_EXTRA+=(-DOpenBLAS_ROOT="$d" -DDNNL_ROOT="$d")
  # The cuDNN frontend's headers (tools/gpu_bundle.sh packs them) unless the
  # machine's Python has the wheel.
  [ -e "$DEPS_DIR/cudnn_frontend/include/cudnn_frontend.h" ] &&
    CMAKE_EXTRA+=(-DCUDNN_FRONTEND_ROOT="$DEPS_DIR/cudnn_frontend")
}
CMAKE_EXTRA=()
if [ "$NO_BUILD" = 1 ]; then
  record bundle skipped 0 "--no-build" ""
elif [ -n "$BUNDLE" ]; then
  run_step bundle 0 120 "$BUNDLE" "rm -rf '$DEPS_DIR' && mkdir -p '$DEPS_DIR' && tar xzf '$BUNDLE' -C '$DEPS_DIR'"
  [ "$(result_of bundle)" = passed ] && export_bundle_paths
else
  record bundle skipped 0 "no bundle (.gpu/deps.tar.gz): using this machine's libraries" ""
fi
# Data for the trainers: the bundle's copy, else the Debian packages'.
FMNIST=/usr/share/datasets/fashion-mnist FORTUNES=/usr/share/games/fortunes
[ -d "$DEPS_DIR/usr/share/datasets/fashion-mnist" ] && FMNIST=$DEPS_DIR/usr/share/datasets/fashion-mnist
[ -d "$DEPS_DIR/usr/share/games/fortunes" ] && FORTUNES=$DEPS_DIR/usr/share/games/fortunes
export DDP_FASHION_MNIST_DIR=$FMNIST  # for the end-to-end gpu tests (tools/gpu_check/)

# cuDNN and NCCL from PyTorch's pip wheels when the toolkit has none (the GPU
# machine's layout): FindCUDNN/FindNCCL take the roots from the environment.
if [ -z "${CUDNN_ROOT:-}" ] && [ ! -e /usr/local/cuda/include/cudnn_version.h ]; then
  CUDNN_ROOT=$(python3 -c 'import nvidia.cudnn as m; print(m.__path__[0])' 2>/dev/null) && export CUDNN_ROOT
fi
if [ -z "${NCCL_ROOT:-}" ] && [ ! -e /usr/local/cuda/include/nccl.h ]; then
  NCCL_ROOT=$(python3 -c 'import nvidia.nccl as m; print(m.__path__[0])' 2>/dev/null) && export NCCL_ROOT
fi

# ---- 2. configure and build -------------------------------------------------------
if [ "$NO_BUILD" = 1 ]; then
  record configure skipped 0 "--no-build: using $B as built" ""
  record build skipped 0 "--no-build" ""
else
  launcher=()
  command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  run_step configure 0 300 "" "cmake -S '$ROOT' -B '$B' -G Ninja -DCMAKE_BUILD_TYPE=Release \
-DDDP_WITH_CUDA=ON -DDDP_CUDA_ARCHS=90 ${launcher[*]} ${CMAKE_EXTRA[*]}"
  if [ "$(result_of configure)" = passed ]; then
    # -k 0: build everything that can be built, so one broken target does
    # not hide the results of all the others.
    run_step build 0 "$BUILD_TIMEOUT" "" "cmake --build '$B' -j$JOBS -- -k 0"
  else
    record build skipped 0 "configure failed" ""
  fi
fi

# ---- 3. versions and the GPU ----------------------------------------------------------
INFO=$B/tools/ddp_info/ddp_info
VERSIONS="(ddp_info was not built)"
if [ -x "$INFO" ]; then
  run_step versions 0 60 "$INFO" "'$INFO' --markdown"
  VERSIONS=$(sed 1,2d "$OUT/logs/versions.log")
  if grep -q '^| GPU [0-9]' "$OUT/logs/versions.log"; then HAVE_GPU=1
  else GPU_REASON=$(sed -n 's/^| GPU | none (\(.*\)) |.*/\1/p' "$OUT/logs/versions.log"); fi
else
  record versions failed 0 "$INFO missing" ""
  GPU_REASON="ddp_info missing"
fi
SMI=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
[ -n "$SMI" ] && figure "nvidia-smi (name, driver, memory)" "$SMI"
grep -aq DDP_CUDA_DEBUG_SYNC "$B/src/libddp.so" 2>/dev/null && DEBUG_SYNC_NOTE="" ||
  DEBUG_SYNC_NOTE="libddp does not read DDP_CUDA_DEBUG_SYNC yet: that run equals a plain one"
[ "$DRY_RUN" = 1 ] && [ -x "$(command -v ctest)" ] &&
  figure "gpu tests that would run" "$(ctest --test-dir "$B" -N -L gpu 2>/dev/null | sed -n 's/^Total Tests: //p')"

# ---- 4. test suites on the GPU --------------------------------------------------------------
CT="ctest --test-dir '$B' --output-on-failure --timeout 300"
# Four at a time, except the tests that take most of the GPU's memory on
# purpose (the out-of-memory retry, the 2^31-element tensors): alone after.
ALONE='CudaAllocatorOomRetry|LargeTensorGpu'
GPU_TESTS="$CT -L gpu -j4 -E '$ALONE'; a=\$?; $CT -L gpu -R '$ALONE'; b=\$?; [ \$a = 0 ] && [ \$b = 0 ]"
run_step ctest_gpu 1 600 "$B/CTestTestfile.cmake" "$GPU_TESTS"
run_step op_consistency 1 300 "$B/CTestTestfile.cmake" "$CT -R op_consistency"
run_step ctest_gpu_launch_blocking 1 600 "$B/CTestTestfile.cmake" "export CUDA_LAUNCH_BLOCKING=1; $GPU_TESTS"
run_step ctest_gpu_debug_sync 1 600 "$B/CTestTestfile.cmake" "export DDP_CUDA_DEBUG_SYNC=1; $GPU_TESTS"
[ -n "$DEBUG_SYNC_NOTE" ] && figure "DDP_CUDA_DEBUG_SYNC" "$DEBUG_SYNC_NOTE"
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$SANITIZER" ] || [ "$DRY_RUN" = 1 ]; then
  # The caching allocator and the element-wise/reduction/copy kernels.
  run_step memcheck 1 480 "$B/tests/tensor_gpu" "${SANITIZER:-compute-sanitizer} --tool memcheck \
--error-exitcode 1 --leak-check no '$B/tests/tensor_gpu' --gtest_filter='CudaAllocator.*:CudaPinned.*:CudaBackend.*'"
else
  record memcheck skipped 0 "compute-sanitizer not found" ""
fi

# ---- 5. trainers ----------------------------------------------------------------------------
TR=$B/examples/train_resnet
for amp in off bf16 f16; do
  run_step "train_resnet_$amp" 1 300 "$TR" "'$TR' --data fashion-mnist --data-dir '$FMNIST' --max-steps 300 \
--batch-size 128 --amp $amp --log-every 20 --eval-limit 2000 --seed 0 --metrics '$OUT/logs/resnet_$amp.jsonl'"
  if [ "$(result_of "train_resnet_$amp")" = passed ]; then
    figure "train_resnet --amp $amp: final training loss (mean of last 20 steps)" "$(json_get "$OUT/logs/resnet_$amp.jsonl" loss)"
    figure "train_resnet --amp $amp: test accuracy (2,000 images), images/s" \
      "$(json_get "$OUT/logs/train_resnet_$amp.log" test_accuracy), $(json_get "$OUT/logs/train_resnet_$amp.log" images_per_s)"
  fi
done
L0=$(json_get "$OUT/logs/resnet_off.jsonl" loss)
for amp in bf16 f16; do
  L=$(json_get "$OUT/logs/resnet_$amp.jsonl" loss)
  check_step "resnet_${amp}_vs_f32" "train_resnet_off train_resnet_$amp" \
    "|loss($amp) - loss(f32)| <= $RESNET_LOSS_TOL" \
    "[ \"\$(calc 'abs($L - $L0) <= $RESNET_LOSS_TOL and math.isfinite($L)')\" = True ]"
done

TG=$B/examples/train_gpt
G0="" G1=""
# fortunes' text when there, else the project's own docs (text either way).
GPT_TEXT=$FORTUNES
[ -d "$GPT_TEXT" ] || GPT_TEXT=$ROOT/docs
GPT_DATA="--data text --data-dir '$GPT_TEXT'"
run_step train_gpt 1 300 "$TG" "'$TG' --model gpt-tiny --steps 200 $GPT_DATA --log-every 10 --seed 0 \
--metrics '$OUT/logs/gpt.jsonl'"
if [ "$(result_of train_gpt)" = passed ]; then
  G0=$(json_first "$OUT/logs/gpt.jsonl" loss) G1=$(json_get "$OUT/logs/gpt.jsonl" loss)
  figure "train_gpt gpt-tiny: training loss first / last logged" "$G0 / $G1"
  figure "train_gpt gpt-tiny: val loss, tokens/s" \
    "$(json_get "$OUT/logs/train_gpt.log" val_loss), $(json_get "$OUT/logs/train_gpt.log" tokens_per_s)"
fi
check_step train_gpt_learns train_gpt "gpt-tiny's loss is finite and fell" \
  "[ \"\$(calc 'math.isfinite($G1) and $G1 < $G0')\" = True ]"

# ---- 6. DDP benchmarks ----------------------------------------------------------------------
BD=$B/benchmarks/bench_ddp/bench_ddp
DDPRUN=$B/tools/ddprun/ddprun
run_step bench_ddp_nccl_w1 1 300 "$BD" "'$BD' --model resnet50 --device cuda --backend nccl --batch-size 64 \
--steps 10 --json '$OUT/logs/bench_ddp_nccl.json'"
run_step bench_ddp_gloo_w2 1 300 "$BD $DDPRUN" "'$DDPRUN' --nproc-per-node 2 '$BD' --model resnet20 \
--device cuda --backend gloo --json '$OUT/logs/bench_ddp_gloo.json'"
for b in nccl gloo; do
  j=$OUT/logs/bench_ddp_$b.json
  [ -f "$j" ] && figure "bench_ddp $b (world $(json_get "$j" world_size)): step s plain / ddp, DDP overhead" \
    "$(json_get "$j" step_s_plain) / $(json_get "$j" step_s_ddp), $(json_get "$j" ddp_overhead)"
done

# ---- 7. throughput beside the PyTorch twins ---------------------------------------------------
REF=$ROOT/benchmarks/reference
BR=$B/benchmarks/bench_resnet/bench_resnet BG=$B/benchmarks/bench_gpt/bench_gpt
R_ARGS="--model resnet50 --batch-size 256 --amp bf16 --channels-last --steps 30 --warmup 10"
G_ARGS="--batch-size 16 --seq-len 1024 --amp bf16 --steps 20 --warmup 5"
run_step bench_resnet 1 300 "$BR" "'$BR' $R_ARGS --json '$OUT/logs/bench_resnet.json'"
run_step bench_resnet_torch 1 300 "$REF/bench_resnet.py" "python3 '$REF/bench_resnet.py' $R_ARGS \
--json '$OUT/logs/bench_resnet_torch.json'"
run_step bench_gpt 1 300 "$BG" "'$BG' --model gpt2_124m $G_ARGS --json '$OUT/logs/bench_gpt.json'"
run_step bench_gpt_torch_compile 1 480 "$REF/bench_gpt.py" "python3 '$REF/bench_gpt.py' --model gpt2_124m \
$G_ARGS --compile --json '$OUT/logs/bench_gpt_torch.json'"
ratio() {  # label libddp.json torch.json key
  local a b
  a=$(json_get "$2" "$4") b=$(json_get "$3" "$4")
  [ -n "$a" ] && figure "$1 libddp $4" "$a"
  [ -n "$b" ] && figure "$1 PyTorch $4" "$b"
  [ -n "$a" ] && [ -n "$b" ] && figure "**$1 libddp ÷ PyTorch**" "**$(calc "round($a / $b, 3)")**"
}
ratio "ResNet-50 bf16 NHWC b256 (vs eager AMP)" "$OUT/logs/bench_resnet.json" "$OUT/logs/bench_resnet_torch.json" images_per_s
ratio "GPT-2 124M bf16 B16 T1024 (vs torch.compile)" "$OUT/logs/bench_gpt.json" "$OUT/logs/bench_gpt_torch.json" tokens_per_s

# ---- 8. the report ---------------------------------------------------------------------------
REPORT=$OUT/report.md
failed=$(failed_steps)
{
  echo "# libddp GPU check, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "$( [ "$DRY_RUN" = 1 ] && echo "**Dry run**: steps that need a GPU are skipped. " )Commit \`$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)\`$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with local changes)'), build \`$B\`, host $(hostname), $(nproc) cores, total $SECONDS s of a ${BUDGET} s budget."
  echo
  echo "## Versions"
  echo
  echo "$VERSIONS"
  echo
  report_steps_and_figures
  echo
  echo "## Failures"
  echo
  [ "$failed" = 0 ] && echo "None."
  for i in "${!STEP_IDS[@]}"; do
    [ "${STEP_RESULTS[$i]}" = failed ] || continue
    echo "### ${STEP_IDS[$i]}: ${STEP_NOTES[$i]}"
    echo
    echo '```'
    if [ -f "$OUT/logs/${STEP_IDS[$i]}.log" ]; then
      # The command, then the first lines that say what went wrong.
      head -n 1 "$OUT/logs/${STEP_IDS[$i]}.log"
      grep -n -m 25 -iE 'error|fail|fatal|abort|what\(\)|timed out|Expected|Which is|not found' \
        "$OUT/logs/${STEP_IDS[$i]}.log" | grep -v '^1:' | cut -c1-300
    fi
    echo '```'
    echo
  done
  echo "## Commands"
  echo
  echo '```'
  report_commands
  echo '```'
} > "$REPORT"
echo "gpu_check: $failed step(s) failed; report: $REPORT" >&2
[ "$failed" = 0 ]
