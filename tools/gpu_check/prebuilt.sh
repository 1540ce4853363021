#!/usr/bin/env bash
# The GPU check from a prebuilt pack (tools/gpu_pack.sh), in one short call
# on the GPU machine (issue 24). tools/gpu_check.sh --prebuilt runs this.
#
#   tools/gpu_check.sh --prebuilt PACK [--dry-run] [options] OUTDIR
#
# Unpacks PACK, relocates its CTest files, puts the pack's lib/ and the
# Python wheels' nvidia/*/lib folders on the library path, ldd's every
# program (printing what is missing or would come from outside the pack),
# prints the driver, the GPU and the versions actually loaded, then runs,
# each step under a hard timeout, the report rewritten after every step:
#   tests     every gpu test, one process per test executable, the
#             memory-heavy ones alone after the rest; CTest's other gpu tests
#   rerun     only the failed tests again, under CUDA_LAUNCH_BLOCKING=1,
#             DDP_CUDA_DEBUG_SYNC=1 and cuDNN's and its frontend's logging
#   trainers  train_resnet f32/bf16/f16 and train_gpt, concurrently, with
#             their loss checks
#   bench     bench_resnet and bench_gpt beside their eager PyTorch twins,
#             one at a time, and bench_ddp on nccl at world size 1
#   extra     only with time left: compute-sanitizer memcheck of the
#             allocator and kernel tests, and the torch.compile GPT twin
# If the programs do not load, it builds libddp, the gpu tests and the
# trainers for sm_90 from the working tree with the pack's headers (the
# fallback) and runs tests and trainers from that build.
# At most 8 files land in OUTDIR: report.md, versions.md, tests.log,
# failures.log, trainers.log, bench.log, extra.log, failed-tests.txt.
#
# Options:
#   --dry-run        no GPU here: run every test executable (their tests skip)
#                    and check that every other program loads; every library
#                    must come from the pack, glibc or NVIDIA's set
#   --budget S       whole-run limit in seconds (default 480); a step never
#                    gets more than what is left
#   --work DIR       where the pack is unpacked and logs kept
#                    (default /tmp/ddp-gpu-pack)
#   --steps LIST     comma-separated subset of tests,rerun,trainers,bench,extra
#                    (default all)
#   --filter E=F     run only gtest filter F in test executable E (e.g.
#                    nn_gpu='ConvGpu.*'); repeatable, in the order given; other
#                    executables are not run
#   --fallback       build from source even when the programs load
#   --serial         run the test executables one after another, not at once
#                    (to tell a test's own failure from one caused by another
#                    process on the same GPU)
# Exit status: 0 when no step failed, 1 otherwise, 2 for a bad command line.
set -uo pipefail

usage() { sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }

PACK="" OUT="" DRY_RUN=0 BUDGET=480 WORK=/tmp/ddp-gpu-pack STEPS=tests,rerun,trainers,bench,extra
FORCE_FALLBACK=0 SERIAL=0
declare -A FILTERS=()
FILTER_ORDER=()  # the executables in the order their --filter was given
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt) PACK=${2:?--prebuilt needs the pack}; shift ;;
    --dry-run) DRY_RUN=1 ;;
    --budget) BUDGET=${2:?--budget needs seconds}; shift ;;
    --work) WORK=${2:?--work needs a folder}; shift ;;
    --steps) STEPS=${2:?--steps needs a list}; shift ;;
    --filter) f=${2:?--filter needs EXE=FILTER}; FILTERS[${f%%=*}]=${f#*=}; FILTER_ORDER+=("${f%%=*}"); shift ;;
    --fallback) FORCE_FALLBACK=1 ;;
    --serial) SERIAL=1 ;;
    -h|--help) usage 0 ;;
    -*) echo "gpu_check: unknown option $1" >&2; usage 2 ;;
    *) [ -z "$OUT" ] || { echo "gpu_check: one OUTDIR only" >&2; usage 2; }; OUT=$1 ;;
  esac
  shift
done
[ -n "$PACK" ] && [ -n "$OUT" ] || { echo "gpu_check: --prebuilt PACK and OUTDIR are required" >&2; usage 2; }
[ -f "$PACK" ] || { echo "gpu_check: no pack at $PACK (make it with tools/gpu_pack.sh)" >&2; exit 2; }
for s in ${STEPS//,/ }; do
  case "$s" in tests|rerun|trainers|bench|extra) ;; *) echo "gpu_check: unknown step $s" >&2; exit 2 ;; esac
done
want() { [[ ",$STEPS," == *",$1,"* ]]; }

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PACK=$(realpath "$PACK")
mkdir -p "$OUT" || exit 2
OUT=$(realpath "$OUT")
rm -f "$OUT"/{report.md,versions.md,tests.log,failures.log,trainers.log,bench.log,extra.log,failed-tests.txt}
LOGS=$WORK/logs
source "$ROOT/tools/gpu_check/common.sh"

# ---- the report, rewritten after every step ------------------------------------------
write_report() {
  {
    echo "# libddp GPU check (prebuilt pack), $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "$( [ "$DRY_RUN" = 1 ] && echo "**Dry run** (no GPU): tests skip, other programs only load. " )Pack \`$(basename "$PACK")\` ($(du -m "$PACK" | cut -f1) MiB), commit \`$(manifest commit | cut -c1-12)\`$( [ "$(manifest dirty)" = yes ] && echo ' (dirty)'), archs $(manifest cuda_archs), host $(hostname), $(nproc) cores; $SECONDS s of a $BUDGET s budget so far."
    echo
    report_steps_and_figures
    echo
    echo "## Test executables"
    echo
    echo "| executable | passed | failed | skipped | exit | note |"
    echo "|---|---|---|---|---|---|"
    printf '%s\n' "${EXE_ROWS[@]}"
    echo
    echo "## Failed tests"
    echo
    if [ -s "$LOGS/failed-tests.txt" ]; then sed 's/^/- /' "$LOGS/failed-tests.txt"; else echo "None."; fi
    echo
    echo "## Versions"
    echo
    cat "$LOGS/versions.md" 2>/dev/null
    echo
    echo "## Commands"
    echo
    echo '```'
    report_commands
    echo '```'
  } > "$OUT/report.md.tmp" && mv "$OUT/report.md.tmp" "$OUT/report.md"
  # The logs OUTDIR brings back (each cut to 8 MiB).
  for f in versions.md tests.log failures.log trainers.log bench.log extra.log failed-tests.txt; do
    [ -f "$LOGS/$f" ] && tail -c 8M "$LOGS/$f" > "$OUT/$f"
  done
  return 0
}
EXE_ROWS=()
left() { echo $((BUDGET - SECONDS)); }
# clip LIMIT: the limit, but no more than the budget left (0 when < 10 s left).
clip() { local l; l=$(left); [ "$l" -lt 10 ] && { echo 0; return; }; [ "$1" -gt "$l" ] && echo "$l" || echo "$1"; }

# ---- 1. unpack and relocate ----------------------------------------------------------------
P=$WORK/pack B=$WORK/pack/build
manifest() { sed -n "s/^$1 //p" "$P/MANIFEST" 2>/dev/null | head -n 1; }
rm -rf "$WORK" && mkdir -p "$LOGS"
start=$SECONDS
if ! tar -xJf "$PACK" -C "$WORK"; then
  record unpack failed $((SECONDS - start)) "tar -xJf $PACK failed" ""; write_report; exit 1
fi
ORIG_B=$(manifest build_dir) ORIG_SRC=$(manifest source_dir)
# CTest's files name the build's and the checkout's original paths: point
# them at the pack and at this checkout (the build's path first: it lies
# inside the checkout's).
find "$B" \( -name CTestTestfile.cmake -o -name '*_include.cmake' -o -name '*_tests.cmake' \) -print0 |
  xargs -0 -r sed -i -e "s|$ORIG_B|$B|g" -e "s|$ORIG_SRC|$ROOT|g"
# Tests run through `cmake -P` name the build machine's cmake: this one's.
ORIG_CMAKE=$(manifest cmake_command) HERE_CMAKE=$(command -v cmake || true)
if [ -n "$ORIG_CMAKE" ] && [ ! -x "$ORIG_CMAKE" ] && [ -n "$HERE_CMAKE" ]; then
  find "$B" -name CTestTestfile.cmake -print0 | xargs -0 -r sed -i "s|\"$ORIG_CMAKE\"|\"$HERE_CMAKE\"|g"
fi
# Paths compiled into the programs (the tests' golden data, DDP_TEST_DATA_DIR)
# name the original checkout: where it does not exist, a link to this one.
LINK_NOTE=""
if [ ! -e "$ORIG_SRC" ] && [ "$ORIG_SRC" != "$ROOT" ] && mkdir -p "$(dirname "$ORIG_SRC")" 2>/dev/null &&
   ln -s "$ROOT" "$ORIG_SRC" 2>/dev/null; then
  LINK_NOTE="; $ORIG_SRC -> $ROOT"
fi
record unpack passed $((SECONDS - start)) "$(manifest commit | cut -c1-12), built in $ORIG_B$LINK_NOTE" "tar -xJf $PACK -C $WORK"

# ---- 2. library path, ldd, versions -----------------------------------------------------------
NV_LIBS=$(python3 - <<'PY' 2>/dev/null
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except Exception:
    roots = []
dirs = set()
for r in roots:
    for so in glob.glob(os.path.join(r, "**", "lib*.so*"), recursive=True):
        dirs.add(os.path.dirname(so))
print(":".join(sorted(dirs)))
PY
)
export LD_LIBRARY_PATH="$P/lib${NV_LIBS:+:$NV_LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The GPU machine's libstdc++ is normally newer; the pack's only when the
# programs ask for a version it lacks.
if ldd "$P/lib/libddp.so" 2>&1 | grep -q "GLIBCXX_.*not found\|CXXABI_.*not found\|GCC_.*not found"; then
  export LD_LIBRARY_PATH="$P/lib/fallback:$LD_LIBRARY_PATH"
  figure "libstdc++" "the pack's (the machine's is older)"
fi
PROGRAMS=$(sed -n 's/^program //p' "$P/MANIFEST")
start=$SECONDS
: > "$LOGS/ldd.txt"
missing=0 outside=0
for rel in $PROGRAMS lib/libddp.so; do
  f=$B/$rel; [ "$rel" = lib/libddp.so ] && f=$P/lib/libddp.so
  ldd "$f" > "$LOGS/ldd.one" 2>&1
  if grep -q "not found" "$LOGS/ldd.one"; then
    missing=$((missing + 1)); echo "$rel: $(grep 'not found' "$LOGS/ldd.one" | tr -s ' \t\n' ' ')" >> "$LOGS/ldd.txt"
  fi
  # From outside the pack, only glibc, NVIDIA's libraries and libstdc++/libgcc_s.
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' "$LOGS/ldd.one" | while read -r name path; do
    case "$path" in "$P"/*) continue ;; esac
    is_glibc "$name" || is_nvidia "$name" && continue
    [[ $name =~ ^(libstdc\+\+|libgcc_s)\.so ]] && continue
    echo "$rel: $name from outside the pack: $path"
  done >> "$LOGS/ldd.txt"
done
outside=$(grep -c "from outside the pack" "$LOGS/ldd.txt")
if [ "$missing" = 0 ] && [ "$outside" = 0 ]; then
  record ldd passed $((SECONDS - start)) "$(echo $PROGRAMS | wc -w) programs: every library found" "ldd"
else
  record ldd failed $((SECONDS - start)) "$missing program(s) with missing libraries, $outside library(ies) from outside the pack: $(head -n 3 "$LOGS/ldd.txt" | tr '\n' ';')" "ldd"
fi
# Which NVIDIA libraries would load (ldd of libddp), for the report.
NVLOAD=$(ldd "$P/lib/libddp.so" 2>/dev/null | awk '$1 ~ /^lib(cudart|cublas|cublasLt|cudnn|nccl|nvrtc)\.so/ {print $1 " => " $3}')

INFO=$B/tools/ddp_info/ddp_info HAVE_GPU=0 LOADS=1
{
  echo "### ddp_info --markdown"
  echo
  timeout 60 "$INFO" --markdown 2>&1 || echo "(ddp_info failed: exit $?)"
  echo
  echo "### nvidia-smi"
  echo
  echo '```'
  timeout 30 nvidia-smi 2>&1 | head -n 20 || echo "(no nvidia-smi)"
  echo '```'
  echo
  echo "### NVIDIA libraries libddp resolves (LD_LIBRARY_PATH: pack, then the wheels)"
  echo
  echo '```'
  echo "$NVLOAD"
  echo '```'
  echo
  echo "### ldd problems"
  echo
  echo '```'
  cat "$LOGS/ldd.txt"
  echo '```'
} > "$LOGS/versions.md"
if grep -q '^| GPU [0-9]' "$LOGS/versions.md"; then HAVE_GPU=1; fi
grep -q "(ddp_info failed" "$LOGS/versions.md" && LOADS=0
[ "$missing" = 0 ] || LOADS=0
SMI=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
[ -n "$SMI" ] && figure "GPU (name, driver, memory)" "$SMI"
for lib in cudnn nccl cublas cudart; do
  v=$(sed -n "s/^| *$lib[^|]*| *\([^|]*\)|.*/\1/Ip" "$LOGS/versions.md" | head -n 1 | xargs)
  [ -n "$v" ] && figure "$lib (loaded)" "$v"
done
if [ "$LOADS" = 1 ]; then
  record versions passed 0 "$([ "$HAVE_GPU" = 1 ] && echo "GPU found" || echo "no GPU: $(grep -m1 '^| GPU' "$LOGS/versions.md" | cut -c1-120)")" "$INFO --markdown"
else
  record versions failed 0 "the programs do not load: see versions.md" "$INFO --markdown"
fi
write_report
if [ "$DRY_RUN" = 0 ] && [ "$HAVE_GPU" = 0 ] && [ "$LOADS" = 1 ]; then
  record gpu failed 0 "no usable GPU (ddp_info sees none); the checks below would only skip" ""
  write_report; exit 1
fi

# ---- fallback: build from source when the programs do not load --------------------------------------
if [ "$LOADS" = 0 ] || [ "$FORCE_FALLBACK" = 1 ]; then
  FB=$WORK/build-fallback D=$P/deps
  fb_cmd="cmake -S '$ROOT' -B '$FB' -G Ninja -DCMAKE_BUILD_TYPE=Release -DDDP_WITH_CUDA=ON -DDDP_CUDA_ARCHS=90 \
-DDDP_WITH_MPI=OFF -DCMAKE_PREFIX_PATH='$D/usr;$D/usr/lib/x86_64-linux-gnu/cmake' -DOpenBLAS_ROOT='$D/usr' -DDNNL_ROOT='$D/usr' \
-DCUDNN_FRONTEND_ROOT='$D/cudnn_frontend' && PKG_CONFIG_PATH='$D/usr/lib/x86_64-linux-gnu/pkgconfig:$D/usr/share/pkgconfig' \
cmake --build '$FB' -j$(nproc) --target ddp ddp_info train_resnet train_gpt \$(cd '$B/tests' && ls *_gpu)"
  export PKG_CONFIG_PATH="$D/usr/lib/x86_64-linux-gnu/pkgconfig:$D/usr/share/pkgconfig"
  export CUDNN_ROOT=${CUDNN_ROOT:-$(python3 -c 'import nvidia.cudnn as m; print(m.__path__[0])' 2>/dev/null)}
  export NCCL_ROOT=${NCCL_ROOT:-$(python3 -c 'import nvidia.nccl as m; print(m.__path__[0])' 2>/dev/null)}
  start=$SECONDS
  limit=$(clip 330)
  if [ "$DRY_RUN" = 1 ] && [ "$FORCE_FALLBACK" = 0 ]; then
    record fallback failed 0 "dry run: the programs do not load here" "$fb_cmd"
  elif [ "$limit" = 0 ]; then
    record fallback skipped 0 "over budget" "$fb_cmd"
  else
    timeout -k 10 "$limit" bash -c "$fb_cmd" > "$LOGS/extra.log" 2>&1
    rc=$?
    if [ "$rc" = 0 ]; then
      record fallback passed $((SECONDS - start)) "built for sm_90 in $FB" "$fb_cmd"
      # The fallback build's programs at the pack's relative paths.
      for f in $(cd "$FB" && ls tests/*_gpu tools/ddp_info/ddp_info examples/train_resnet examples/train_gpt 2>/dev/null); do
        cp "$FB/$f" "$B/$f"
      done
      cp -L "$FB"/src/libddp.so.* "$P/lib/" 2>/dev/null
      STEPS=tests,trainers
    else
      record fallback failed $((SECONDS - start)) "exit $rc: see extra.log" "$fb_cmd"
      write_report; exit 1
    fi
  fi
  write_report
fi

export DDP_FASHION_MNIST_DIR=$P/data/fashion-mnist  # CTest's trainer tests (tools/gpu_check/)

# ---- 3. every gpu test, one process per executable ---------------------------------------------------
# gtest's output per executable: counts, failed names, and the test it was in
# when it died (timed out or crashed).
summarize_exe() {  # NAME LOG RC ROW_LABEL -> appends EXE_ROWS and failed names
  local name=$1 log=$2 rc=$3 label=${4:-$1} passed failed skipped note="" last
  passed=$(grep -c '^\[       OK \]' "$log")
  # "[  FAILED  ] Suite.Test (12 ms)", or for a parameterised test
  # "[  FAILED  ] Inst/Suite.Test/name, where GetParam() = ... (12 ms)"; the
  # summary at the end repeats them without the time, so count timed lines only.
  failed=$(grep -E '^\[  FAILED  \] [^ ,]+(, where .*)? \([0-9]+ ms\)$' "$log" |
           sed -E 's/^\[  FAILED  \] ([^ ,]+).*/\1/' | sort -u)
  skipped=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$log")
  if [ "$rc" = 124 ] || [ "$rc" = 137 ] || [ "$rc" -ge 128 ]; then
    last=$(grep -E '^\[ RUN      \]' "$log" | tail -n 1 | sed -E 's/^\[ RUN      \] //')
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then note="timed out in $last"; else note="died (signal $((rc - 128))) in $last"; fi
    [ -n "$last" ] && failed=$(printf '%s\n%s' "$failed" "$last" | sed '/^$/d' | sort -u)
  elif [ "$rc" != 0 ] && [ -z "$failed" ]; then
    note="exit $rc without a failed test: $(grep -m1 -iE 'error|what\(\)|terminate' "$log" | cut -c1-150)"
  fi
  for t in $failed; do echo "$name:$t" >> "$LOGS/failed-tests.txt"; done
  EXE_ROWS+=("| $label | $passed | $(echo "$failed" | sed '/^$/d' | wc -l) | $skipped | $rc | ${note//|/\\|} |")
  [ "$rc" = 0 ] && [ -z "$failed" ]
}
# Tests that take most of the GPU's memory on purpose: alone, after the rest.
HEAVY='*OomRetry*:*LargeTensor*:*Large*Gpu*'
run_exes() {  # every selected executable concurrently, then the heavy tests alone
  local exes=() e f pids=() names=() logs=() rcs=() i limit rc ok=1
  if [ "${#FILTER_ORDER[@]}" -gt 0 ]; then
    for f in "${FILTER_ORDER[@]}"; do
      [ -x "$B/tests/$f" ] && exes+=("$f") || echo "no test executable $f" >> "$LOGS/tests.log"
    done
  else
    for e in "$B"/tests/*_gpu; do [ -x "$e" ] && exes+=("$(basename "$e")"); done
  fi
  : > "$LOGS/tests.log"
  for phase in main heavy; do
    limit=$(clip 240)
    [ "$limit" = 0 ] && { ok=0; echo "over budget before the $phase phase" >> "$LOGS/tests.log"; break; }
    pids=() names=() logs=() rcs=()
    for f in "${exes[@]}"; do
      local filter
      if [ -n "${FILTERS[$f]:-}" ]; then
        [ "$phase" = heavy ] && continue  # a filtered run takes its tests as given, in one phase
        filter=${FILTERS[$f]}
      elif [ "$phase" = main ]; then filter="*-$HEAVY"
      else filter=$HEAVY; fi
      logs+=("$LOGS/$f.$phase.log") names+=("$f")
      [ "$SERIAL" = 1 ] && limit=$(clip 240)
      [ "$limit" = 0 ] && { echo "over budget before $f ($phase)" >> "$LOGS/tests.log"; ok=0; break; }
      ( cd "$B/tests" && DDP_CUDNN_ALLOW_TF32=0 exec timeout -k 10 "$limit" "./$f" --gtest_filter="$filter" \
          --gtest_color=no ) > "$LOGS/$f.$phase.log" 2>&1 &
      pids+=($!)
      if [ "$SERIAL" = 1 ]; then wait "$!"; rcs[${#pids[@]} - 1]=$?; fi
    done
    for i in "${!pids[@]}"; do
      if [ "$SERIAL" = 1 ]; then rc=${rcs[$i]}  # waited for as it ran
      else wait "${pids[$i]}"; rc=$?; fi
      { echo "==== ${names[$i]} ($phase) exit $rc"; cat "${logs[$i]}"; } >> "$LOGS/tests.log"
      # A heavy phase that matched no test is not a row of its own.
      if [ "$phase" = heavy ] && grep -q '^\[==========\] 0 tests' "${logs[$i]}"; then continue; fi
      local label=${names[$i]}
      [ "$phase" = heavy ] && label+=" (heavy, alone)"
      summarize_exe "${names[$i]}" "${logs[$i]}" "$rc" "$label" || ok=0
    done
  done
  [ "$ok" = 1 ]
}
if want tests; then
  start=$SECONDS
  : > "$LOGS/failed-tests.txt"
  run_exes
  rc=$?
  # CTest's gpu tests that are not in those executables (the trainers end
  # to end, scripts): through the relocated CTest files.
  prefixes=$(cd "$B/tests" && ls *_gpu 2>/dev/null | sed 's/_gpu$//' | paste -sd'|')
  limit=$(clip 200)
  other=""
  if [ "${#FILTERS[@]}" = 0 ] && [ "$limit" != 0 ]; then
    timeout -k 10 "$limit" ctest --test-dir "$B" -L gpu -E "^($prefixes)\\." --output-on-failure \
      --timeout 180 -j4 >> "$LOGS/tests.log" 2>&1 || rc=1
    other=$(grep -E 'tests passed|No tests were found' "$LOGS/tests.log" | tail -n 1)
    grep -E '^\s+[0-9]+ - .* \((Failed|Timeout|SEGFAULT|Subprocess aborted|Not Run)\)' "$LOGS/tests.log" |
      sed -E 's/^\s+[0-9]+ - ([^ ]+).*/ctest:\1/' >> "$LOGS/failed-tests.txt"
  fi
  n_failed=$(sed '/^$/d' "$LOGS/failed-tests.txt" | wc -l)
  if [ "$rc" = 0 ]; then record tests passed $((SECONDS - start)) "every executable passed; ctest others: $other" "tests/*_gpu, one process each; ctest -L gpu (others)"
  else record tests failed $((SECONDS - start)) "$n_failed failed test(s); ctest others: $other" "tests/*_gpu, one process each; ctest -L gpu (others)"; fi
  write_report
fi

# ---- 4. the failed tests again, with every debugging aid ----------------------------------------------
DEBUG_ENV="CUDA_LAUNCH_BLOCKING=1 DDP_CUDA_DEBUG_SYNC=1 CUDNN_FRONTEND_LOG_INFO=1 CUDNN_FRONTEND_LOG_FILE=stderr \
CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr NCCL_DEBUG=WARN DDP_CUDNN_ALLOW_TF32=0"
if want rerun && [ -s "$LOGS/failed-tests.txt" ]; then
  start=$SECONDS
  : > "$LOGS/failures.log"
  for e in $(grep -v '^ctest:' "$LOGS/failed-tests.txt" | cut -d: -f1 | sort -u); do
    limit=$(clip 90)
    [ "$limit" = 0 ] && break
    filt=$(grep "^$e:" "$LOGS/failed-tests.txt" | cut -d: -f2- | paste -sd:)
    # Each failed test alone, so one crash does not hide the next; more than
    # four from one executable (a common cause, most likely) in one process.
    tests=(${filt//:/ })
    [ "${#tests[@]}" -gt 4 ] && tests=("$filt")
    for t in "${tests[@]}"; do
      limit=$(clip 60); [ "$limit" = 0 ] && break
      echo "==== $e --gtest_filter=$t  ($DEBUG_ENV)" >> "$LOGS/failures.log"
      ( cd "$B/tests" && env $DEBUG_ENV timeout -k 5 "$limit" "./$e" --gtest_filter="$t" --gtest_color=no ) 2>&1 |
        tail -c 1M >> "$LOGS/failures.log"
      echo "==== exit ${PIPESTATUS[0]}" >> "$LOGS/failures.log"
    done
  done
  record rerun passed $((SECONDS - start)) "failed tests rerun one by one with the debugging aids: failures.log" "env $DEBUG_ENV tests/E --gtest_filter=T"
  write_report
elif want rerun; then
  record rerun skipped 0 "no failed test" ""
fi

# ---- 5. trainers, concurrently ----------------------------------------------------------------------------
FM=$P/data/fashion-mnist TEXT=$P/data/text
RESNET_LOSS_TOL=${RESNET_LOSS_TOL:-0.15}  # see tools/gpu_check.sh: ~3x the f32 run's seed spread
if want trainers; then
  start=$SECONDS
  limit=$(clip 150)
  TR=$B/examples/train_resnet TG=$B/examples/train_gpt
  if [ "$DRY_RUN" = 1 ]; then
    ok=1
    for t in "$TR" "$TG"; do "$t" --help > /dev/null 2>&1 || ok=0; done
    [ "$ok" = 1 ] && record trainers skipped 0 "dry run: both load (--help)" "" ||
      record trainers failed 0 "dry run: a trainer does not start (--help)" ""
  elif [ "$limit" = 0 ]; then
    record trainers skipped 0 "over budget" ""
  else
    pids=()
    for amp in off bf16 f16; do
      timeout -k 10 "$limit" "$TR" --data fashion-mnist --data-dir "$FM" --max-steps 300 --batch-size 128 \
        --amp "$amp" --log-every 20 --eval-limit 2000 --seed 0 --metrics "$LOGS/resnet_$amp.jsonl" \
        > "$LOGS/train_resnet_$amp.log" 2>&1 &
      pids+=($!)
    done
    timeout -k 10 "$limit" "$TG" --model gpt-tiny --steps 200 --data text --data-dir "$TEXT" --log-every 10 \
      --seed 0 --metrics "$LOGS/gpt.jsonl" > "$LOGS/train_gpt.log" 2>&1 &
    pids+=($!)
    rcs=""
    for p in "${pids[@]}"; do wait "$p"; rcs+="$? "; done
    : > "$LOGS/trainers.log"
    for l in train_resnet_off train_resnet_bf16 train_resnet_f16 train_gpt; do
      { echo "==== $l"; tail -c 200K "$LOGS/$l.log"; } >> "$LOGS/trainers.log"
    done
    note="exit codes $rcs"
    for amp in off bf16 f16; do
      figure "train_resnet --amp $amp: final loss (mean of last 20 steps), test acc (2,000), images/s" \
        "$(json_get "$LOGS/resnet_$amp.jsonl" loss), $(json_get "$LOGS/train_resnet_$amp.log" test_accuracy), $(json_get "$LOGS/train_resnet_$amp.log" images_per_s)"
    done
    L0=$(json_get "$LOGS/resnet_off.jsonl" loss)
    good=1
    [ "$rcs" = "0 0 0 0 " ] || good=0
    for amp in bf16 f16; do
      L=$(json_get "$LOGS/resnet_$amp.jsonl" loss)
      if [ "$(calc "abs($L - $L0) <= $RESNET_LOSS_TOL and math.isfinite($L)")" != True ]; then
        good=0; note+="; resnet $amp loss $L vs f32 $L0 (tol $RESNET_LOSS_TOL)"
      fi
    done
    G0=$(json_first "$LOGS/gpt.jsonl" loss) G1=$(json_get "$LOGS/gpt.jsonl" loss)
    figure "train_gpt gpt-tiny: loss first / last logged, tokens/s" "$G0 / $G1, $(json_get "$LOGS/train_gpt.log" tokens_per_s)"
    [ "$(calc "math.isfinite($G1) and $G1 < $G0")" = True ] || { good=0; note+="; gpt loss did not fall ($G0 -> $G1)"; }
    [ "$good" = 1 ] && record trainers passed $((SECONDS - start)) "$note" "train_resnet --amp off|bf16|f16 --max-steps 300; train_gpt gpt-tiny --steps 200" ||
      record trainers failed $((SECONDS - start)) "$note" "train_resnet --amp off|bf16|f16 --max-steps 300; train_gpt gpt-tiny --steps 200"
  fi
  write_report
fi

# ---- 6. benchmarks beside the PyTorch twins, one at a time ------------------------------------------------
REF=$P/scripts
R_ARGS="--model resnet50 --batch-size 256 --amp bf16 --channels-last --steps 30 --warmup 10"
G_ARGS="--model gpt2_124m --batch-size 16 --seq-len 1024 --amp bf16 --steps 20 --warmup 5"
bench_one() {  # ID LIMIT COMMAND...
  local id=$1 lim; lim=$(clip "$2"); shift 2
  [ "$lim" = 0 ] && { echo "==== $id: over budget" >> "$LOGS/bench.log"; return 1; }
  echo "==== $id: $*" >> "$LOGS/bench.log"
  timeout -k 10 "$lim" "$@" >> "$LOGS/bench.log" 2>&1
  local rc=$?; echo "==== $id exit $rc" >> "$LOGS/bench.log"; return $rc
}
if want bench; then
  start=$SECONDS
  : > "$LOGS/bench.log"
  if [ "$DRY_RUN" = 1 ]; then
    ok=1
    for t in benchmarks/bench_resnet/bench_resnet benchmarks/bench_gpt/bench_gpt benchmarks/bench_ddp/bench_ddp; do
      "$B/$t" --help > /dev/null 2>&1 || { ok=0; echo "$t does not start" >> "$LOGS/bench.log"; }
    done
    [ "$ok" = 1 ] && record bench skipped 0 "dry run: the benchmarks load (--help)" "" ||
      record bench failed 0 "dry run: a benchmark does not start" ""
  else
    fails=""
    bench_one bench_resnet 90 "$B/benchmarks/bench_resnet/bench_resnet" $R_ARGS --json "$LOGS/bench_resnet.json" || fails+=" bench_resnet"
    bench_one bench_resnet_torch 90 python3 "$REF/bench_resnet.py" $R_ARGS --json "$LOGS/bench_resnet_torch.json" || fails+=" bench_resnet_torch"
    bench_one bench_gpt 90 "$B/benchmarks/bench_gpt/bench_gpt" $G_ARGS --json "$LOGS/bench_gpt.json" || fails+=" bench_gpt"
    bench_one bench_gpt_torch 90 python3 "$REF/bench_gpt.py" $G_ARGS --json "$LOGS/bench_gpt_torch.json" || fails+=" bench_gpt_torch"
    bench_one bench_ddp_nccl 90 "$B/benchmarks/bench_ddp/bench_ddp" --model resnet50 --device cuda --backend nccl \
      --batch-size 64 --steps 10 --json "$LOGS/bench_ddp_nccl.json" || fails+=" bench_ddp_nccl"
    ratio() {  # label libddp.json torch.json key
      local a b; a=$(json_get "$2" "$4") b=$(json_get "$3" "$4")
      figure "$1: libddp / PyTorch eager $4" "${a:-?} / ${b:-?}$([ -n "$a" ] && [ -n "$b" ] && echo " = **$(calc "round($a / $b, 3)")×**")"
    }
    ratio "ResNet-50 bf16 NHWC b256" "$LOGS/bench_resnet.json" "$LOGS/bench_resnet_torch.json" images_per_s
    ratio "GPT-2 124M bf16 B16 T1024" "$LOGS/bench_gpt.json" "$LOGS/bench_gpt_torch.json" tokens_per_s
    j=$LOGS/bench_ddp_nccl.json
    [ -f "$j" ] && figure "bench_ddp nccl world 1: step s plain / ddp, overhead" \
      "$(json_get "$j" step_s_plain) / $(json_get "$j" step_s_ddp), $(json_get "$j" ddp_overhead)"
    for f in "$LOGS"/bench_*.json; do [ -f "$f" ] && { echo "==== $(basename "$f")"; cat "$f"; echo; } >> "$LOGS/bench.log"; done
    [ -z "$fails" ] && record bench passed $((SECONDS - start)) "" "bench_resnet, bench_gpt beside benchmarks/reference twins; bench_ddp nccl" ||
      record bench failed $((SECONDS - start)) "failed or timed out:$fails" "bench_resnet, bench_gpt beside benchmarks/reference twins; bench_ddp nccl"
  fi
  write_report
fi

# ---- 7. with time left: memcheck and torch.compile ---------------------------------------------------------
if want extra; then
  start=$SECONDS
  SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -n 1)
  notes=""
  if [ "$DRY_RUN" = 1 ]; then
    record extra skipped 0 "dry run" ""
  elif [ "$(left)" -lt 60 ]; then
    record extra skipped 0 "only $(left) s left" ""
  else
    [ -f "$LOGS/extra.log" ] || : > "$LOGS/extra.log"
    if [ -n "$SAN" ]; then
      lim=$(clip 150)
      echo "==== memcheck" >> "$LOGS/extra.log"
      ( cd "$B/tests" && timeout -k 10 "$lim" "$SAN" --tool memcheck --error-exitcode 1 --leak-check no ./tensor_gpu \
        --gtest_filter='CudaAllocator.*:CudaPinned.*:CudaBackend.*' --gtest_color=no ) 2>&1 | tail -c 2M >> "$LOGS/extra.log"
      notes+="memcheck exit ${PIPESTATUS[0]}; "
    else
      notes+="no compute-sanitizer; "
    fi
    if [ "$(left)" -gt 60 ]; then
      bench_one bench_gpt_torch_compile 150 python3 "$REF/bench_gpt.py" $G_ARGS --compile --json "$LOGS/bench_gpt_compile.json" >/dev/null 2>&1
      notes+="torch.compile twin exit $?"
      a=$(json_get "$LOGS/bench_gpt.json" tokens_per_s) b=$(json_get "$LOGS/bench_gpt_compile.json" tokens_per_s)
      [ -n "$b" ] && figure "GPT-2 124M bf16 B16 T1024: libddp / torch.compile tokens_per_s" "${a:-?} / $b$([ -n "$a" ] && echo " = **$(calc "round($a / $b, 3)")×**")"
    fi
    record extra passed $((SECONDS - start)) "$notes" "compute-sanitizer memcheck tensor_gpu (allocator, backend); bench_gpt.py --compile"
  fi
  write_report
fi

failed=$(failed_steps)
echo "gpu_check: $failed step(s) failed in $SECONDS s; report: $OUT/report.md" >&2
[ "$failed" = 0 ]
