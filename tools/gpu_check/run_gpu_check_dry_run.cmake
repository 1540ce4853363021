# Runs tools/gpu_check.sh --dry-run --no-build on BUILD_DIR and checks its
# report: every step of the list below is there, and each one passed or was
# skipped (a failed dry-run step means something a GPU run needs was not
# built, or ddp_info failed). Arguments: SCRIPT, BUILD_DIR, OUT_DIR.
file(REMOVE_RECURSE ${OUT_DIR})
execute_process(COMMAND bash ${SCRIPT} --dry-run --no-build --build-dir ${BUILD_DIR} ${OUT_DIR}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT EXISTS ${OUT_DIR}/report.md)
  message(FATAL_ERROR "gpu_check wrote no report (exit ${rc}):\n${out}${err}")
endif()
file(READ ${OUT_DIR}/report.md report)
set(steps bundle configure build versions ctest_gpu op_consistency ctest_gpu_launch_blocking
    ctest_gpu_debug_sync memcheck train_resnet_off train_resnet_bf16 train_resnet_f16
    resnet_bf16_vs_f32 resnet_f16_vs_f32 train_gpt train_gpt_learns bench_ddp_nccl_w1
    bench_ddp_gloo_w2 bench_resnet bench_resnet_torch bench_gpt bench_gpt_torch_compile)
foreach(step ${steps})
  if(NOT report MATCHES "\n\\| ${step} \\| (passed|skipped) \\|")
    message(FATAL_ERROR "step ${step} is not listed as passed or skipped:\n${report}\n${err}")
  endif()
endforeach()
if(report MATCHES "\\| failed \\|")
  message(FATAL_ERROR "a step failed:\n${report}\n${err}")
endif()
if(NOT report MATCHES "\\| versions \\| passed \\|" OR NOT report MATCHES "\\| libddp \\|")
  message(FATAL_ERROR "no versions table:\n${report}")
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gpu_check --dry-run exited ${rc}:\n${err}")
endif()
message(STATUS "gpu_check --dry-run: ${steps}")
