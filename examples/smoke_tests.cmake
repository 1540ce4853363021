# Smoke tests of the example trainers (included from examples/CMakeLists.txt).
# Each runs a few steps, so the whole set stays well under a minute per test
# on a 2-core machine. Multi-rank tests carry the label dist and are guarded
# like tests/parallel/multi: mpi through mpirun, gloo through ddprun.
#   resume tests: train N steps and save, then --resume and train to M; the
#                 second run must say it resumed from N, end at M, and end
#                 with a JSON line holding the documented keys. For
#                 train_resnet a reference run trains M steps straight and
#                 the interrupted run must log the same loss at every step.
#   flag tests:   a bad command line exits 2 with a message naming the flag.

set(_ddp_ex_check ${CMAKE_CURRENT_SOURCE_DIR}/run_checked.cmake)
set(_ddp_ex_work ${CMAKE_CURRENT_BINARY_DIR}/smoke)

# ddp_example_test(NAME LABELS <labels> [ENV <env>] [CMD0 <argv...>] CMD1 <argv...> [CMD2 <argv...>]
#                  [EXPECT_RC rc] [EXPECT_REGEX re] [JSON_KEYS k...] [JSON_EQUALS k=v...]
#                  [CLEAN_DIR dir] [COMPARE_METRICS reference.jsonl|run.jsonl])
function(ddp_example_test name)
  cmake_parse_arguments(T "" "EXPECT_RC;EXPECT_REGEX;CLEAN_DIR;COMPARE_METRICS"
                        "LABELS;ENV;CMD0;CMD1;CMD2;JSON_KEYS;JSON_EQUALS" ${ARGN})
  list(JOIN T_CMD0 "|" cmd0)
  list(JOIN T_CMD1 "|" cmd1)
  list(JOIN T_CMD2 "|" cmd2)
  list(JOIN T_JSON_KEYS "|" keys)
  list(JOIN T_JSON_EQUALS "|" equals)
  if(NOT DEFINED T_EXPECT_RC)
    set(T_EXPECT_RC 0)
  endif()
  add_test(NAME ${name}
           COMMAND ${CMAKE_COMMAND} "-DCMD0=${cmd0}" "-DCMD1=${cmd1}" "-DCMD2=${cmd2}" "-DEXPECT_RC=${T_EXPECT_RC}"
                   "-DEXPECT_REGEX=${T_EXPECT_REGEX}" "-DJSON_KEYS=${keys}"
                   "-DJSON_EQUALS=${equals}" "-DCLEAN_DIR=${T_CLEAN_DIR}"
                   "-DCOMPARE_METRICS=${T_COMPARE_METRICS}" -P ${_ddp_ex_check})
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" TIMEOUT 300
                       ENVIRONMENT "${T_ENV}")
endfunction()

# Real Fashion-MNIST when Debian's dataset-fashion-mnist is installed, else
# synthetic 32x32 images (the same code path after the dataset).
if(EXISTS /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz OR
   EXISTS /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte)
  set(_ddp_ex_data --data fashion-mnist)
else()
  set(_ddp_ex_data --data synthetic --synthetic-size 512)
endif()
set(_ddp_ex_resnet_args ${_ddp_ex_data} --batch-size 32 --eval-limit 256 --log-every 1 --workers 1)
set(_ddp_ex_gpt_args --model gpt-tiny --block-size 64 --batch-size 8 --grad-accum 2 --steps 20
                     --val-batches 2 --log-every 1)
set(_ddp_ex_resnet_keys test_accuracy images_per_s total_s world_size)
set(_ddp_ex_gpt_keys val_loss tokens_per_s total_s world_size)
set(_ddp_ex_mpi_env "OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_mpi_yield_when_idle=1;OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
set(_ddp_ex_gloo_env "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")

# ---- multi-rank: checkpoint at the end, then resume -------------------------
set(_launchers)
if(DDP_HAVE_MPI)
  list(APPEND _launchers mpi)
  set(_ddp_ex_launch_mpi ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe -np 2
                         ${MPIEXEC_PREFLAGS})
endif()
if(DDP_HAVE_GLOO AND TARGET ddprun)
  list(APPEND _launchers gloo)
  set(_ddp_ex_launch_gloo $<TARGET_FILE:ddprun> --nproc-per-node 2 --master-port 0)
endif()
# The mpi run trains channels-last, the gloo run contiguous (Note [Trainer
# memory format]): each layout through DDP, a checkpoint and a resume.
set(_ddp_ex_layout_mpi channels-last)
set(_ddp_ex_layout_gloo contiguous)
foreach(backend IN LISTS _launchers)
  set(launch ${_ddp_ex_launch_${backend}})
  set(layout --memory-format ${_ddp_ex_layout_${backend}})
  set(dir ${_ddp_ex_work}/resnet_${backend})
  file(MAKE_DIRECTORY ${_ddp_ex_work})
  ddp_example_test(examples.train_resnet.${backend}.resume
    LABELS dist ENV ${_ddp_ex_${backend}_env} CLEAN_DIR ${dir}
    CMD0 ${launch} $<TARGET_FILE:train_resnet> ${_ddp_ex_resnet_args} --max-steps 5
         --metrics ${dir}.reference.jsonl --backend ${backend} ${layout}
    COMPARE_METRICS "${dir}.reference.jsonl|${dir}.jsonl"
    CMD1 ${launch} $<TARGET_FILE:train_resnet> ${_ddp_ex_resnet_args} --max-steps 3
         --checkpoint-dir ${dir} --metrics ${dir}.jsonl --backend ${backend} ${layout}
    CMD2 ${launch} $<TARGET_FILE:train_resnet> ${_ddp_ex_resnet_args} --max-steps 5
         --checkpoint-dir ${dir} --metrics ${dir}.jsonl --backend ${backend} --resume ${layout}
    EXPECT_REGEX "; ${_ddp_ex_layout_${backend}}.*resumed from step 3 .*step 5/5 .*saved checkpoint at step 5"
    JSON_KEYS ${_ddp_ex_resnet_keys}
    JSON_EQUALS world_size=2 start_step=3 steps=5 backend=${backend})

  set(dir ${_ddp_ex_work}/gpt_${backend})
  ddp_example_test(examples.train_gpt.${backend}.grad_accum_resume
    LABELS dist ENV ${_ddp_ex_${backend}_env} CLEAN_DIR ${dir}
    CMD1 ${launch} $<TARGET_FILE:train_gpt> ${_ddp_ex_gpt_args} --max-steps 4 --checkpoint-dir ${dir}
         --backend ${backend}
    CMD2 ${launch} $<TARGET_FILE:train_gpt> ${_ddp_ex_gpt_args} --max-steps 6 --checkpoint-dir ${dir}
         --backend ${backend} --resume
    EXPECT_REGEX "resumed from step 4 .*step 6/6 "
    JSON_KEYS ${_ddp_ex_gpt_keys}
    JSON_EQUALS world_size=2 start_step=4 steps=6 grad_accum=2)
endforeach()

# PowerSGD's per-rank error memory and Q, and the rebuilt bucket plan, are in
# the checkpoint (Note [Per-rank checkpoint sections]), written in the
# background every 2 steps (--async-checkpoint: the ranks agree through the
# store): the resumed run's compressed steps retrace the reference's losses.
if(DDP_HAVE_GLOO AND TARGET ddprun)
  set(dir ${_ddp_ex_work}/resnet_powersgd)
  set(_psgd --comm-hook powersgd --powersgd-start-iter 2 --backend gloo)
  ddp_example_test(examples.train_resnet.gloo.powersgd_resume
    LABELS dist ENV ${_ddp_ex_gloo_env} CLEAN_DIR ${dir}
    CMD0 ${_ddp_ex_launch_gloo} $<TARGET_FILE:train_resnet> ${_ddp_ex_resnet_args} --max-steps 6
         --metrics ${dir}.reference.jsonl ${_psgd}
    COMPARE_METRICS "${dir}.reference.jsonl|${dir}.jsonl"
    CMD1 ${_ddp_ex_launch_gloo} $<TARGET_FILE:train_resnet> ${_ddp_ex_resnet_args} --max-steps 4
         --checkpoint-dir ${dir} --metrics ${dir}.jsonl --async-checkpoint --checkpoint-every 2
         ${_psgd}
    CMD2 ${_ddp_ex_launch_gloo} $<TARGET_FILE:train_resnet> ${_ddp_ex_resnet_args} --max-steps 6
         --checkpoint-dir ${dir} --metrics ${dir}.jsonl --resume ${_psgd}
    EXPECT_REGEX "comm hook: powersgd.*resumed from step 4 .*step 6/6 "
    JSON_KEYS ${_ddp_ex_resnet_keys}
    JSON_EQUALS world_size=2 start_step=4 steps=6 backend=gloo)
  # The GPT trainer's --comm-hook, the same checkpoint section.
  set(dir ${_ddp_ex_work}/gpt_powersgd)
  ddp_example_test(examples.train_gpt.gloo.powersgd_resume
    LABELS dist ENV ${_ddp_ex_gloo_env} CLEAN_DIR ${dir}
    CMD1 ${_ddp_ex_launch_gloo} $<TARGET_FILE:train_gpt> ${_ddp_ex_gpt_args} --max-steps 4
         --checkpoint-dir ${dir} ${_psgd}
    CMD2 ${_ddp_ex_launch_gloo} $<TARGET_FILE:train_gpt> ${_ddp_ex_gpt_args} --max-steps 6
         --checkpoint-dir ${dir} --resume ${_psgd}
    EXPECT_REGEX "comm hook: powersgd.*resumed from step 4 .*step 6/6 "
    JSON_KEYS ${_ddp_ex_gpt_keys}
    JSON_EQUALS world_size=2 start_step=4 steps=6)
endif()

# ---- one process: the mixed-precision and channels-last paths ---------------
ddp_example_test(examples.train_resnet.single.bf16_channels_last
  LABELS unit ENV ${_ddp_ex_gloo_env}
  CMD1 $<TARGET_FILE:train_resnet> --data synthetic --synthetic-size 64 --batch-size 16
       --max-steps 2 --amp bf16 --channels-last --print-params --log-every 1
  EXPECT_REGEX "conv1.weight"
  JSON_KEYS ${_ddp_ex_resnet_keys} JSON_EQUALS world_size=1 steps=2 amp=bf16)

# ---- photographs: the test folders of cmake/DdpImageTestData.cmake ----------
# PATH/train + PATH/val, and a flat class folder with a held-out third; the
# progress line carries the data stall and the loader's rate.
ddp_example_test(examples.train_resnet.single.imagefolder
  LABELS unit ENV ${_ddp_ex_gloo_env}
  CMD1 $<TARGET_FILE:train_resnet> --data imagefolder:${DDP_IMAGE_TEST_FOLDER} --model resnet20
       --image-size 32 --batch-size 6 --epochs 1 --workers 2 --log-every 1
  EXPECT_REGEX "data stall [0-9.]+s/step  loader [0-9]+ img/s"
  JSON_KEYS ${_ddp_ex_resnet_keys} JSON_EQUALS world_size=1 steps=3)
ddp_example_test(examples.train_resnet.single.imagefolder_flat
  LABELS unit ENV ${_ddp_ex_gloo_env}
  CMD1 $<TARGET_FILE:train_resnet> --data imagefolder:${DDP_IMAGE_TEST_FOLDER}/train
       --model resnet20 --image-size 32 --batch-size 4 --epochs 1 --holdout-every 3
  EXPECT_REGEX "test accuracy [0-9.]+%  test loss [0-9.]+  .6 images."
  JSON_KEYS ${_ddp_ex_resnet_keys} JSON_EQUALS world_size=1 steps=3)
# --decode-device cuda with no GPU visible (CUDA_VISIBLE_DEVICES=-1, so the
# same on GPU machines): refused before any data or model work, exit 2,
# naming the flag and what device decoding lacks here.
ddp_example_test(examples.train_resnet.single.decode_device_without_gpu
  LABELS unit ENV ${_ddp_ex_gloo_env} CUDA_VISIBLE_DEVICES=-1
  CMD1 $<TARGET_FILE:train_resnet> --data imagefolder:${DDP_IMAGE_TEST_FOLDER} --model resnet20
       --image-size 32 --batch-size 6 --epochs 1 --decode-device cuda
  EXPECT_RC 2
  EXPECT_REGEX "--decode-device cuda: needs a GPU, but this rank runs on cpu; (libddp was built without nvJPEG|no usable GPU|nvJPEG: )")
set_tests_properties(examples.train_resnet.single.imagefolder
                     examples.train_resnet.single.imagefolder_flat
                     examples.train_resnet.single.decode_device_without_gpu
                     PROPERTIES FIXTURES_REQUIRED image_folder)

# ---- bad command lines: exit 2, naming the flag -----------------------------
set(_ddp_ex_bad_flags
  "resnet_unknown_flag|train_resnet|--bogus|--bogus"
  "resnet_bad_int|train_resnet|--batch-size=abc|--batch-size: 'abc' is not an integer"
  "resnet_bad_choice|train_resnet|--model|resnet7|--model: 'resnet7' is not one of"
  "resnet_bad_amp|train_resnet|--amp|fp8|--amp: 'fp8'"
  "resnet_missing_value|train_resnet|--epochs|--epochs: needs a value"
  "resnet_below_min|train_resnet|--epochs|0|--epochs: '0' is below the minimum 1"
  "resnet_flag_with_value|train_resnet|--resume=yes|--resume: takes no value"
  "resnet_resume_without_dir|train_resnet|--resume|--resume: needs --checkpoint-dir"
  "resnet_bad_memory_format|train_resnet|--memory-format|nhwc|--memory-format: 'nhwc' is not one of"
  "resnet_memory_format_conflict|train_resnet|--channels-last|--memory-format|contiguous|--channels-last: contradicts --memory-format contiguous"
  "resnet_bad_data|train_resnet|--data|imagefolder:|--data: 'imagefolder:' is not one of fashion-mnist, cifar10, synthetic, imagefolder:PATH, packed:PATH"
  "resnet_holdout_without_images|train_resnet|--holdout-every|5|--holdout-every: only for --data imagefolder:PATH"
  "resnet_decode_device_without_images|train_resnet|--decode-device|cuda|--data|fashion-mnist|--decode-device cuda: only for --data imagefolder:PATH or packed:PATH"
  "resnet_bad_decode_device|train_resnet|--decode-device|bogus|--decode-device: 'bogus' is not one of cpu, cuda"
  "gpt_bad_accum|train_gpt|--grad-accum|0|--grad-accum: '0' is below the minimum 1"
  "gpt_custom_without_sizes|train_gpt|--model|custom|--model custom: needs --n-layer"
  "gpt_bad_number|train_gpt|--lr|fast|--lr: 'fast' is not a finite number"
  "gpt_indivisible_batch|train_gpt|--batch-size|3|--grad-accum|2|--batch-size: the global batch 3 is not divisible"
  "gpt_heads|train_gpt|--n-embd|100|--n-head|3|--n-embd 100 is not divisible by --n-head 3"
  "gpt_top_k_zero|train_gpt|--sample|8|--top-k|0|--top-k: '0' is below the minimum 1"
  "gpt_negative_temperature|train_gpt|--temperature|-1|--temperature: '-1' must be greater than 0"
  "gpt_negative_sample|train_gpt|--sample|-3|--sample: '-3' is below the minimum 0"
  "gpt_bad_comm_hook|train_gpt|--comm-hook|int8|--comm-hook: 'int8' is not one of"
  "gpt_powersgd_rank_without_hook|train_gpt|--powersgd-rank|2|--powersgd-rank, --powersgd-start-iter: need --comm-hook powersgd"
  "gpt_comm_hook_fault_tolerant|train_gpt|--fault-tolerant|--comm-hook|bf16|--fault-tolerant: takes no --comm-hook")
foreach(spec IN LISTS _ddp_ex_bad_flags)
  string(REPLACE "|" ";" parts "${spec}")
  list(POP_FRONT parts name program)
  list(POP_BACK parts regex)
  string(REGEX REPLACE "([][+.*()^$?])" "\\\\\\1" regex "${regex}")  # match literally
  ddp_example_test(examples.flags.${name} LABELS unit
    CMD1 $<TARGET_FILE:${program}> ${parts} EXPECT_RC 2 EXPECT_REGEX "${regex}")
endforeach()

# ---- resuming a checkpoint of another run is refused -------------------------
set(dir ${_ddp_ex_work}/gpt_mismatch)
ddp_example_test(examples.train_gpt.single.resume_mismatch
  LABELS unit ENV ${_ddp_ex_gloo_env} CLEAN_DIR ${dir}
  CMD1 $<TARGET_FILE:train_gpt> --block-size 32 --batch-size 4 --steps 2 --val-batches 1
       --checkpoint-dir ${dir}
  CMD2 $<TARGET_FILE:train_gpt> --block-size 32 --batch-size 8 --steps 2 --val-batches 1
       --checkpoint-dir ${dir} --resume
  EXPECT_RC 1 EXPECT_REGEX "--resume: the checkpoint in .* is for gpt-tiny with global batch 4, not gpt-tiny with global batch 8")

# ---- text out: --sample after training, and from a checkpoint ---------------
# Trains a few steps on the fortunes corpus and prints 40 sampled bytes; the
# JSON line counts them. Then --resume --max-steps 0 samples from the saved
# checkpoint without training.
set(_ddp_ex_sample_args --block-size 32 --batch-size 4 --steps 3 --val-batches 1 --log-every 1
                        --sample 40 --prompt "Q:" --temperature 0.8 --top-k 5)
ddp_example_test(examples.train_gpt.single.sample
  LABELS unit ENV ${_ddp_ex_gloo_env}
  CMD1 $<TARGET_FILE:train_gpt> ${_ddp_ex_sample_args}
  EXPECT_REGEX "sample .40 bytes, temperature 0.8, top-k 5, seed 0.:.Q:"
  JSON_EQUALS steps=3 sample_bytes=40)
set(dir ${_ddp_ex_work}/gpt_sample)
ddp_example_test(examples.train_gpt.single.sample_from_checkpoint
  LABELS unit ENV ${_ddp_ex_gloo_env} CLEAN_DIR ${dir}
  CMD1 $<TARGET_FILE:train_gpt> --block-size 32 --batch-size 4 --steps 3 --val-batches 1
       --checkpoint-dir ${dir}
  CMD2 $<TARGET_FILE:train_gpt> --block-size 32 --batch-size 4 --steps 3 --val-batches 1
       --checkpoint-dir ${dir} --resume --max-steps 0 --sample 25 --top-k 1
  EXPECT_REGEX "resumed from step 3 .*sample .25 bytes, temperature 1, top-k 1, seed 0.:"
  JSON_EQUALS start_step=3 steps=3 sample_bytes=25)

# ---- --init-from-hf: the tiny GPT-2 of tests/golden/make_hf_gpt2_golden.py ----
# (Hugging Face's layout, vocabulary 256) loads into the matching custom
# model, trains and samples; a model of another width is refused, naming
# the first mismatched tensor and both shapes.
set(_ddp_ex_hf ${CMAKE_SOURCE_DIR}/tests/golden/hf_gpt2/model.safetensors)
ddp_example_test(examples.train_gpt.single.init_from_hf
  LABELS unit ENV ${_ddp_ex_gloo_env}
  CMD1 $<TARGET_FILE:train_gpt> --model custom --n-layer 2 --n-head 4 --n-embd 32 --block-size 16
       --init-from-hf ${_ddp_ex_hf} --batch-size 4 --steps 2 --val-batches 1 --sample 12
  EXPECT_REGEX "initialised from Hugging Face GPT-2 weights .*model.safetensors.*sample .12 bytes"
  JSON_EQUALS steps=2 sample_bytes=12)
ddp_example_test(examples.train_gpt.single.init_from_hf_wrong_config
  LABELS unit ENV ${_ddp_ex_gloo_env}
  CMD1 $<TARGET_FILE:train_gpt> --model custom --n-layer 2 --n-head 4 --n-embd 48 --block-size 16
       --init-from-hf ${_ddp_ex_hf} --batch-size 4 --steps 2
  EXPECT_RC 1
  EXPECT_REGEX "tensor 'wte.weight' is .256, 32. in the file but .256, 48. in this GPT")
