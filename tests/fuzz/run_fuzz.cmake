# ctest's fuzz.<name>: runs FUZZER for SECONDS on a working corpus under WORK
# (the committed SEEDS read alongside, never written), under ASan+UBSan.
# Fails on a crash, a leak, a hang (-timeout), a sanitizer report or an
# input the fuzzer could not run; prints the figures docs/benchmarks.md
# records (executions, exec/s, corpus size).
file(MAKE_DIRECTORY ${WORK})
set(ENV{ASAN_OPTIONS} "detect_leaks=1:abort_on_error=1:symbolize=1")
set(ENV{UBSAN_OPTIONS} "print_stacktrace=1:halt_on_error=1")
set(ENV{DDP_LOG_LEVEL} "error")
# The working corpus is WORK/corpus; crash inputs and the whole log go to
# WORK (the log's progress lines would drown ctest's output).
file(MAKE_DIRECTORY ${WORK}/corpus)
execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048 -max_len=${MAX_LEN}
          -print_final_stats=1 -artifact_prefix=${WORK}/ ${WORK}/corpus ${SEEDS}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
file(WRITE ${WORK}/fuzz.log "${out}")
string(REGEX MATCH "stat::number_of_executed_units: *[0-9]+" runs "${out}")
string(REGEX MATCH "stat::average_exec_per_sec: *[0-9]+" speed "${out}")
string(REGEX MATCH "#[0-9]+[ \t]+DONE[^\n]*" done "${out}")
message("${done}\n${runs}\n${speed}")
if(NOT rc EQUAL 0)
  # The report: everything but libFuzzer's progress lines.
  string(REGEX REPLACE "#[0-9]+[ \t]+(NEW|REDUCE|pulse|INITED|RELOAD)[^\n]*\n" "" report "${out}")
  message(FATAL_ERROR "${FUZZER} failed (exit ${rc}); the input that failed is under ${WORK}/, "
                      "the whole log in ${WORK}/fuzz.log:\n${report}")
endif()
