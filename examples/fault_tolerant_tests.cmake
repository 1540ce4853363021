# Tests of train_gpt --fault-tolerant (Note [Fault-tolerant GPT trainer],
# docs/fault_tolerance.md); included from examples/CMakeLists.txt after
# smoke_tests.cmake, whose ddp_example_test and variables they use.
#   run:      2 ranks under ddprun 2:2 train a few steps and end with the
#             JSON line of the plain run's keys (label dist).
#   matches:  without failures, the fault-tolerant run ends with the plain
#             run's validation loss (fault_tolerant_matches_plain.sh; dist).
#   kill:     3 ranks under ddprun 2:3; slot 0 is SIGKILLed once a step has
#             committed; the survivors heal, the replacement joins, every
#             replica check says "identical", exit 0
#             (fault_tolerant_kill.sh; label dist).
#   refusals: what the fault-tolerant loop lacks exits 2 naming the flag
#             (label unit).
# The fault-tolerant loop trains on the CPU and refuses a visible GPU, so
# these runs hide the GPUs (CUDA_VISIBLE_DEVICES=-1); the gpu test at the
# end checks the refusal itself (fault_tolerant_gpu_refusal.sh).

set(_ddp_ft_env ${_ddp_ex_gloo_env} CUDA_VISIBLE_DEVICES=-1)
set(_ddp_ft_gpt_args --model gpt-tiny --block-size 64 --val-batches 2)

if(DDP_HAVE_GLOO AND TARGET ddprun)
  ddp_example_test(examples.train_gpt.gloo.fault_tolerant
    LABELS dist ENV ${_ddp_ft_env}
    CMD1 $<TARGET_FILE:ddprun> --nproc-per-node 2:2 --master-port 0 $<TARGET_FILE:train_gpt>
         ${_ddp_ft_gpt_args} --batch-size 8 --grad-accum 2 --steps 6 --log-every 1
         --fault-tolerant --check-replicas
    EXPECT_REGEX "fault-tolerant, 2 rank.*step 6/~6 .*done: 6 steps"
    JSON_KEYS ${_ddp_ex_gpt_keys} heals joins
    JSON_EQUALS world_size=2 steps=6 sequences=48 grad_accum=2 heals=0 joins=0 mode=fault-tolerant)

  add_test(NAME examples.train_gpt.gloo.fault_tolerant_matches_plain
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fault_tolerant_matches_plain.sh
            $<TARGET_FILE:ddprun> $<TARGET_FILE:train_gpt> ${_ddp_ex_work}/gpt_ft_matches_plain
            ${_ddp_ft_gpt_args} --batch-size 8 --grad-accum 2 --steps 8 --log-every 4)
  set_tests_properties(examples.train_gpt.gloo.fault_tolerant_matches_plain PROPERTIES
    LABELS dist TIMEOUT 300 ENVIRONMENT "${_ddp_ft_env}")

  # 60 steps: the replacement is admitted within a few steps of the kill
  # (start-up, corpus, a commit), so the job is still running for it even
  # on a loaded machine; every wait in the script polls with a deadline.
  list(JOIN _ddp_ex_gpt_keys " " _ddp_ft_keys)
  add_test(NAME examples.train_gpt.gloo.fault_tolerant_kill
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fault_tolerant_kill.sh
            --ddprun $<TARGET_FILE:ddprun> --work ${_ddp_ex_work}/gpt_fault_tolerant_kill
            --ranks 3 --low 2 --victim 0 --timeout 540
            --keys "${_ddp_ft_keys} heals joins"
            -- $<TARGET_FILE:train_gpt> ${_ddp_ft_gpt_args} --batch-size 12 --grad-accum 2
               --steps 60 --log-every 10)
  set_tests_properties(examples.train_gpt.gloo.fault_tolerant_kill PROPERTIES
    LABELS dist TIMEOUT 600 ENVIRONMENT "${_ddp_ft_env}")
endif()

# The refusals: before any rank joins (options.cpp), or, for the batch, once
# the founding world is known (fault_tolerant.cpp; one process: a world of 1).
set(_ddp_ft_bad_flags
  "gpt_ft_amp|--fault-tolerant|--amp|bf16|--fault-tolerant: takes no --amp"
  "gpt_ft_resume|--fault-tolerant|--resume|--fault-tolerant: takes no --resume"
  "gpt_ft_checkpoint_dir|--fault-tolerant|--checkpoint-dir|ckpt|--fault-tolerant: takes no --checkpoint-dir"
  "gpt_ft_eval_every|--fault-tolerant|--eval-every|5|--fault-tolerant: takes no --eval-every"
  "gpt_ft_tensorboard|--fault-tolerant|--tensorboard|tb|--fault-tolerant: takes no --tensorboard"
  "gpt_ft_backend|--fault-tolerant|--backend|mpi|--fault-tolerant: runs on gloo only"
  "gpt_check_replicas_alone|--check-replicas|--check-replicas: needs --fault-tolerant"
  "gpt_ft_indivisible_batch|--fault-tolerant|--batch-size|6|--grad-accum|4|--batch-size: the global batch 6 is not divisible by the 1 founding rank(s) x grad-accum 4")
foreach(spec IN LISTS _ddp_ft_bad_flags)
  string(REPLACE "|" ";" parts "${spec}")
  list(POP_FRONT parts name)
  list(POP_BACK parts regex)
  string(REGEX REPLACE "([][+.*()^$?])" "\\\\\\1" regex "${regex}")  # match literally
  ddp_example_test(examples.flags.${name} LABELS unit ENV ${_ddp_ft_env}
    CMD1 $<TARGET_FILE:train_gpt> ${parts} EXPECT_RC 2 EXPECT_REGEX "${regex}")
endforeach()

# With a GPU visible the fault-tolerant loop refuses to train (it would
# train on the CPU), exit 2 naming the way out. Skipped without a GPU (the
# one step then trains on the CPU).
add_test(NAME examples.train_gpt.cuda_fault_tolerant_refused
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fault_tolerant_gpu_refusal.sh
                 $<TARGET_FILE:train_gpt>)
set_tests_properties(examples.train_gpt.cuda_fault_tolerant_refused PROPERTIES
  LABELS gpu TIMEOUT 300 SKIP_REGULAR_EXPRESSION "FT_GPU_SKIP"
  ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
