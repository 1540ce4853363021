# cmake -DBENCH=<exe> -DARGS="<args>" -DEXPECT_RC=<status> -DEXPECT_TEXT=<text> -P run_cli_test.cmake
# Runs bench_collectives with ARGS and checks its exit status, and that stderr
# (or, for status 0, stdout) contains EXPECT_TEXT.
separate_arguments(_args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${BENCH} ${_args}
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err TIMEOUT 50)
if(NOT "${_rc}" STREQUAL "${EXPECT_RC}")
  message(FATAL_ERROR "bench_collectives ${ARGS}: exit status '${_rc}', expected ${EXPECT_RC}\n"
                      "stdout:\n${_out}\nstderr:\n${_err}")
endif()
if(EXPECT_RC EQUAL 0)
  set(_text "${_out}")
else()
  set(_text "${_err}")
endif()
string(FIND "${_text}" "${EXPECT_TEXT}" _at)
if(_at LESS 0)
  message(FATAL_ERROR "bench_collectives ${ARGS}: output does not contain '${EXPECT_TEXT}'\n"
                      "stdout:\n${_out}\nstderr:\n${_err}")
endif()
message(STATUS "bench_collectives ${ARGS}: status ${_rc}, '${EXPECT_TEXT}' found")
