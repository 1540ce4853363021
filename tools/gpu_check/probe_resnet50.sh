#!/bin/bash
# Where does ResNet-50's GPU step go? (0.098x of eager PyTorch on an H200,
# docs/gpu-runs.md, 2026-11-28.) Run on the GPU machine from the checkout,
# with the pack carried, in one short call (about 3 minutes):
#   carry: [".gpu"]   command: bash tools/gpu_check/probe_resnet50.sh $OUT
# It times bench_resnet in f32 NCHW, bf16 NHWC (with and without the fused
# batch norm), bf16 NHWC eval, bf16 NCHW and resnet20, and, where nsys
# exists there, the per-kernel time of a bf16 NHWC step; $OUT/probe.txt.
OUT=${1:?usage: probe_resnet50.sh OUTDIR}; WORK=/tmp/ddp-gpu-pack; rm -rf $WORK; mkdir -p $WORK
tar -xJf .gpu/pack.tar.xz -C $WORK; P=$WORK/pack; B=$P/build
NV_LIBS=$(python3 -c 'import glob,os,nvidia; print(":".join(sorted({os.path.dirname(s) for r in nvidia.__path__ for s in glob.glob(os.path.join(r,"**","lib*.so*"),recursive=True)})))')
export LD_LIBRARY_PATH="$P/lib:$NV_LIBS"
{
echo "== tools"; which nsys ncu nvidia-smi; ls /usr/local/cuda*/bin 2>/dev/null | tr '\n' ' '; echo
R=$B/benchmarks/bench_resnet/bench_resnet
run() { echo "== $*"; timeout 60 "$@" 2>&1 | grep -E "^ +[0-9]+ |rror" | head -3; }
run $R --model resnet50 --batch-size 64 --warmup 3 --steps 5
run $R --model resnet50 --batch-size 64 --warmup 3 --steps 5 --amp bf16 --channels-last
run env DDP_BATCH_NORM_FUSION=0 $R --model resnet50 --batch-size 64 --warmup 3 --steps 5 --amp bf16 --channels-last
run $R --model resnet50 --batch-size 64 --warmup 3 --steps 5 --amp bf16 --channels-last --eval
run $R --model resnet50 --batch-size 64 --warmup 3 --steps 5 --amp bf16
run $R --model resnet20 --batch-size 256 --warmup 3 --steps 5 --amp bf16 --channels-last
if command -v nsys >/dev/null; then
  timeout 120 nsys profile -o $OUT/r50 --force-overwrite true --stats=false $R --model resnet50 --batch-size 64 --warmup 2 --steps 3 --amp bf16 --channels-last >/dev/null 2>&1
  timeout 60 nsys stats -r cuda_gpu_kern_sum,cuda_api_sum --format csv $OUT/r50.nsys-rep 2>&1 | head -80
  rm -f $OUT/r50.nsys-rep $OUT/r50.sqlite
fi
} > $OUT/probe.txt 2>&1
cat $OUT/probe.txt | tail -60
