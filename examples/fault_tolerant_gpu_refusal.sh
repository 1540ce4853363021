#!/usr/bin/env bash
# examples.train_gpt.cuda_fault_tolerant_refused (fault_tolerant_tests.cmake):
# with a GPU visible, train_gpt --fault-tolerant refuses to train (its loop
# is the CPU's; Note [Fault-tolerant GPT trainer]) with exit 2 and the way
# out. Without a GPU the one step trains on the CPU and the test prints
# FT_GPU_SKIP, its skip pattern.
#   fault_tolerant_gpu_refusal.sh TRAIN_GPT
set -uo pipefail
out=$("$1" --fault-tolerant --model gpt-tiny --block-size 16 --batch-size 2 --steps 1 \
      --val-batches 1 2>&1)
rc=$?
echo "$out"
want="--fault-tolerant: trains on the CPU only (gloo), but "
if [[ "$out" == *"$want"*" GPU(s) are visible; set CUDA_VISIBLE_DEVICES=-1 to train on the CPU"* ]]; then
  [ "$rc" = 2 ] || { echo "FAIL: exit $rc, want 2"; exit 1; }
  echo "PASS: refused with exit 2"
  exit 0
fi
[ "$rc" = 0 ] || { echo "FAIL: exit $rc without the refusal"; exit 1; }
echo "FT_GPU_SKIP: no GPU visible, the step trained on the CPU"
