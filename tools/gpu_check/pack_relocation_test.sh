#!/usr/bin/env bash
# CTest: tools.gpu_pack.relocated_pack_runs (issue 24). Packs this build tree
# with tools/gpu_pack.sh (fast compression), unpacks it into a fresh folder
# with tools/gpu_check.sh --prebuilt --dry-run, and checks the report: every
# program's libraries come from the pack, glibc or NVIDIA's set (a library
# the pack forgot, or one found only through this machine's paths, fails
# here rather than on the GPU machine), ddp_info runs from the pack, and every
# gpu test executable runs from the pack (its tests skip without a GPU).
#   pack_relocation_test.sh ROOT BUILD_DIR WORK_DIR
set -uo pipefail
ROOT=$1 BUILD=$2 WORK=$3
fail() { echo "FAIL: $*" >&2; [ -f "$WORK/out/report.md" ] && cat "$WORK/out/report.md" >&2; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK"

# The pack must not depend on where it was made: unpack it far from the build.
bash "$ROOT/tools/gpu_pack.sh" --build-dir "$BUILD" --out "$WORK/pack.tar.xz" --level 0 \
  --max-mib 2000 --allow-dirty > "$WORK/pack.log" 2>&1 || { cat "$WORK/pack.log" >&2; fail "gpu_pack.sh failed"; }
grep -q '^gpu_pack: .*programs' "$WORK/pack.log" || fail "gpu_pack printed no summary"
tar -tJf "$WORK/pack.tar.xz" > "$WORK/list.txt" || fail "the pack is not a tar.xz"
for f in pack/MANIFEST pack/lib/libddp.so pack/build/tools/ddp_info/ddp_info pack/build/tests/tensor_gpu \
         pack/build/examples/train_resnet pack/build/CTestTestfile.cmake \
         pack/data/fashion-mnist/train-images-idx3-ubyte pack/deps/cudnn_frontend/include/cudnn_frontend.h \
         pack/scripts/bench_resnet.py; do
  grep -qx "$f" "$WORK/list.txt" || fail "the pack lacks $f"
done
# No NVIDIA library and no glibc in the pack: the GPU machine brings its own.
if grep -E '^pack/lib/(libcudart|libcublas|libcudnn|libnccl|libnvrtc|libc\.so|libm\.so)' "$WORK/list.txt"; then
  fail "the pack holds a library the GPU machine provides"
fi

bash "$ROOT/tools/gpu_check.sh" --prebuilt "$WORK/pack.tar.xz" --dry-run --work "$WORK/unpacked" \
  --budget 400 "$WORK/out" > "$WORK/check.log" 2>&1
rc=$?
R=$WORK/out/report.md
[ -f "$R" ] || { cat "$WORK/check.log" >&2; fail "no report"; }
for step in unpack ldd versions tests; do
  grep -qE "^\| $step \| passed \|" "$R" || fail "step $step did not pass"
done
for step in trainers bench extra; do
  grep -qE "^\| $step \| (passed|skipped) \|" "$R" || fail "step $step neither passed nor was skipped"
done
grep -qE '^\| [a-z_]+ \| failed \|' "$R" && fail "a step failed"
[ "$rc" = 0 ] || fail "gpu_check --prebuilt --dry-run exited $rc"
# ddp_info ran from the pack and named the libraries it loaded.
grep -q '| libddp |' "$WORK/out/versions.md" || fail "versions.md has no ddp_info table"
# Every gpu test executable ran (its tests skipped): one row each, none failed.
n_exe=$(ls "$BUILD"/tests/*_gpu | wc -l)
n_rows=$(grep -cE '^\| [a-z_]+_gpu \| [0-9]+ \| 0 \| [0-9]+ \| 0 \|' "$R")
[ "$n_rows" = "$n_exe" ] || fail "$n_rows of $n_exe gpu test executables ran cleanly from the pack"
# At most 8 files come back from a device call.
[ "$(ls "$WORK/out" | wc -l)" -le 8 ] || fail "more than 8 files in OUTDIR: $(ls "$WORK/out")"
echo "pack relocation: $(sed -n 's/^gpu_pack: //p' "$WORK/pack.log"); $n_rows gpu executables ran from the pack"
