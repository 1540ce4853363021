# Runs one or two commands and checks what they did; used by the examples'
# smoke tests (examples/smoke_tests.cmake). Invoked as
#   cmake [-DCMD0=...] -DCMD1=a|b|c [-DCMD2=...] [-DEXPECT_RC=2] [-DEXPECT_REGEX=re]
#         [-DJSON_KEYS=k1|k2] [-DJSON_EQUALS=k=v|k=v] [-DCLEAN_DIR=dir]
#         [-DCOMPARE_METRICS=reference.jsonl|run.jsonl] -P run_checked.cmake
# Arguments inside CMD1/CMD2 are separated by '|' (a ';' would be split by
# add_test). CMD1, when CMD2 is given, must succeed; the checks apply to the
# last command: its exit status (default 0), a regex its stdout+stderr must
# match, and the JSON object on its last stdout line: keys it must have and
# key=value pairs it must hold (compared as strings, so numbers as printed).
# CMD0 is an optional reference run (must succeed); COMPARE_METRICS then
# requires every step logged in both metrics files to have the same loss as
# printed (6 significant digits): a resumed run must retrace the reference.
cmake_minimum_required(VERSION 3.20)

if(DEFINED CLEAN_DIR AND NOT CLEAN_DIR STREQUAL "")
  file(REMOVE_RECURSE "${CLEAN_DIR}")
endif()
if(NOT DEFINED EXPECT_RC)
  set(EXPECT_RC 0)
endif()

function(run_one spec out_var err_var rc_var)
  string(REPLACE "|" ";" argv "${spec}")
  execute_process(COMMAND ${argv} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  set(${out_var} "${out}" PARENT_SCOPE)
  set(${err_var} "${err}" PARENT_SCOPE)
  set(${rc_var} "${rc}" PARENT_SCOPE)
endfunction()

if(DEFINED CMD0 AND NOT CMD0 STREQUAL "")
  run_one("${CMD0}" out err rc)
  message("---- reference run (${CMD0}) exited ${rc}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the reference run failed with status ${rc}")
  endif()
endif()

set(last "${CMD1}")
if(DEFINED CMD2 AND NOT CMD2 STREQUAL "")
  run_one("${CMD1}" out err rc)
  message("---- first run (${CMD1}) exited ${rc}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the first run failed with status ${rc}")
  endif()
  set(last "${CMD2}")
endif()

run_one("${last}" out err rc)
message("---- run (${last}) exited ${rc}\n${out}${err}")
if(NOT rc STREQUAL "${EXPECT_RC}")
  message(FATAL_ERROR "expected exit status ${EXPECT_RC}, got ${rc}")
endif()
if(DEFINED EXPECT_REGEX AND NOT EXPECT_REGEX STREQUAL "")
  if(NOT "${out}${err}" MATCHES "${EXPECT_REGEX}")
    message(FATAL_ERROR "the output does not match the regex '${EXPECT_REGEX}'")
  endif()
endif()

if((DEFINED JSON_KEYS AND NOT JSON_KEYS STREQUAL "") OR
   (DEFINED JSON_EQUALS AND NOT JSON_EQUALS STREQUAL ""))
  string(STRIP "${out}" stripped)
  string(FIND "${stripped}" "\n" nl REVERSE)
  math(EXPR start "${nl} + 1")
  string(SUBSTRING "${stripped}" ${start} -1 last_line)
  # ddprun prefixes each line of rank r with "[r]: ".
  string(REGEX REPLACE "^\\[[0-9]+\\]: " "" last_line "${last_line}")
  string(JSON kind ERROR_VARIABLE json_error TYPE "${last_line}")
  if(json_error OR NOT kind STREQUAL "OBJECT")
    message(FATAL_ERROR "the last line is not a JSON object: '${last_line}' (${json_error})")
  endif()
  string(REPLACE "|" ";" keys "${JSON_KEYS}")
  foreach(key IN LISTS keys)
    string(JSON value ERROR_VARIABLE json_error GET "${last_line}" "${key}")
    if(json_error)
      message(FATAL_ERROR "the final JSON line lacks the key '${key}': ${last_line}")
    endif()
  endforeach()
  string(REPLACE "|" ";" pairs "${JSON_EQUALS}")
  foreach(pair IN LISTS pairs)
    string(REGEX MATCH "^([^=]+)=(.*)$" _ "${pair}")
    string(JSON value ERROR_VARIABLE json_error GET "${last_line}" "${CMAKE_MATCH_1}")
    if(json_error OR NOT value STREQUAL "${CMAKE_MATCH_2}")
      message(FATAL_ERROR "expected ${CMAKE_MATCH_1} = ${CMAKE_MATCH_2} in the final JSON line, "
                          "got '${value}': ${last_line}")
    endif()
  endforeach()
endif()

# step -> loss as printed, from a metrics file.
function(read_losses path prefix)
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "metrics file '${path}' was not written")
  endif()
  file(STRINGS "${path}" lines)
  set(steps)
  foreach(line IN LISTS lines)
    if(line MATCHES "\"step\": ([0-9]+),.*\"loss\": ([^,}]+)")
      set(${prefix}_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}" PARENT_SCOPE)
      list(APPEND steps ${CMAKE_MATCH_1})
    endif()
  endforeach()
  set(${prefix}_steps "${steps}" PARENT_SCOPE)
endfunction()

if(DEFINED COMPARE_METRICS AND NOT COMPARE_METRICS STREQUAL "")
  string(REPLACE "|" ";" files "${COMPARE_METRICS}")
  list(GET files 0 reference)
  list(GET files 1 candidate)
  read_losses("${reference}" ref)
  read_losses("${candidate}" run)
  set(compared 0)
  foreach(step IN LISTS run_steps)
    if(DEFINED ref_${step})
      if(NOT ref_${step} STREQUAL run_${step})
        message(FATAL_ERROR "step ${step}: loss ${run_${step}} in ${candidate}, "
                            "${ref_${step}} in the reference ${reference}")
      endif()
      math(EXPR compared "${compared} + 1")
    endif()
  endforeach()
  list(LENGTH ref_steps expected)
  if(NOT compared EQUAL expected)
    message(FATAL_ERROR "compared ${compared} steps of ${expected}: the runs logged different steps")
  endif()
  message("---- the losses of all ${compared} logged steps equal the reference")
endif()
