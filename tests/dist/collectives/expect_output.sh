#!/bin/sh
# expect_output.sh PATTERN COMMAND [ARGS...]
# Runs the command and passes only when it exits 0 AND its output (stdout and
# stderr) contains a line matching the extended regular expression PATTERN.
# (CTest's PASS_REGULAR_EXPRESSION alone would ignore the exit status.)
pattern=$1
shift
out=$("$@" 2>&1)
status=$?
printf '%s\n' "$out"
if [ "$status" -ne 0 ]; then
  echo "expect_output: '$1' exited with status $status" >&2
  exit "$status"
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$pattern"; then
  echo "expect_output: no line matches '$pattern'" >&2
  exit 1
fi
