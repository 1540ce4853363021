#!/usr/bin/env bash
# CTest: tools.gpu_pack.refusals (issue 24). gpu_pack.sh refuses what it
# cannot pack, naming why, and gpu_check.sh --prebuilt refuses bad command
# lines; nothing is written in either case.
#   pack_refusals_test.sh ROOT WORK_DIR
set -uo pipefail
ROOT=$1 WORK=$2
rm -rf "$WORK" && mkdir -p "$WORK"
expect() {  # WANT_RC PATTERN COMMAND...: exit status and a message matching PATTERN
  local want=$1 pat=$2 rc; shift 2
  "$@" > "$WORK/out.txt" 2>&1; rc=$?
  [ "$rc" = "$want" ] || { echo "FAIL: exit $rc (want $want): $*"; cat "$WORK/out.txt"; exit 1; }
  grep -qE "$pat" "$WORK/out.txt" || { echo "FAIL: no /$pat/ from: $*"; cat "$WORK/out.txt"; exit 1; }
}
PACK=$ROOT/tools/gpu_pack.sh CHECK=$ROOT/tools/gpu_check.sh
expect 1 "not a CMake build tree" bash "$PACK" --build-dir "$WORK/nothing" --out "$WORK/p.tar.xz"
# A build tree configured without CUDA (the files gpu_pack looks at).
mkdir -p "$WORK/cpu/src" "$WORK/cpu/include/ddp"
touch "$WORK/cpu/CMakeCache.txt" "$WORK/cpu/src/libddp.so.0.1.0"
echo '#define DDP_HAVE_CUDA 0' > "$WORK/cpu/include/ddp/config.h"
expect 1 "configured with CUDA off" bash "$PACK" --build-dir "$WORK/cpu" --out "$WORK/p.tar.xz"
rm "$WORK/cpu/src/libddp.so.0.1.0"
expect 1 "no built libddp" bash "$PACK" --build-dir "$WORK/cpu" --out "$WORK/p.tar.xz"
expect 2 "level must be 0-9" bash "$PACK" --level 12
expect 2 "unknown argument" bash "$PACK" --frobnicate
[ ! -e "$WORK/p.tar.xz" ] || { echo "FAIL: a refused pack was written"; exit 1; }
expect 2 "no pack at" bash "$CHECK" --prebuilt "$WORK/missing.tar.xz" "$WORK/o"
echo x > "$WORK/fake.tar.xz"
expect 2 "unknown step" bash "$CHECK" --prebuilt "$WORK/fake.tar.xz" --steps tests,nap "$WORK/o"
expect 2 "OUTDIR are required" bash "$CHECK" --prebuilt "$WORK/fake.tar.xz"
# A pack that is not one: the unpack step fails and the report says so.
expect 1 "unpack +failed" bash "$CHECK" --prebuilt "$WORK/fake.tar.xz" --work "$WORK/w" "$WORK/o"
grep -q '| unpack | failed |' "$WORK/o/report.md" || { echo "FAIL: no report of the failed unpack"; exit 1; }
echo "gpu_pack/gpu_check refusals: all named"
