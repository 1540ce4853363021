#!/bin/sh
# expect_lines.sh COUNT PATTERN COMMAND [ARGS...]
# Runs the command and passes when at least COUNT lines of its output (stdout
# and stderr) match the extended regular expression PATTERN, whatever its
# exit status (mpirun's is not the ranks' when a rank skips MPI_Finalize).
count=$1
pattern=$2
shift 2
out=$("$@" 2>&1)
printf '%s\n' "$out"
got=$(printf '%s\n' "$out" | grep -Ec -- "$pattern")
if [ "$got" -lt "$count" ]; then
  echo "expect_lines: $got lines match '$pattern', expected $count" >&2
  exit 1
fi
