# Sourced by tools/gpu_check.sh and tools/gpu_check/prebuilt.sh: step
# bookkeeping for the report and small JSON/arithmetic helpers.

# ---- step bookkeeping ---------------------------------------------------------
STEP_IDS=() STEP_RESULTS=() STEP_TIMES=() STEP_NOTES=() STEP_CMDS=()
FIGURES=()      # "| name | value |" rows

record() {  # id result seconds note command
  STEP_IDS+=("$1") STEP_RESULTS+=("$2") STEP_TIMES+=("$3") STEP_NOTES+=("$4") STEP_CMDS+=("$5")
  printf 'gpu_check: %-24s %-8s %5ss  %s\n' "$1" "$2" "$3" "$4" >&2
}
figure() { FIGURES+=("| $1 | $2 |"); }
failed_steps() {  # how many recorded steps failed
  local r n=0
  for r in "${STEP_RESULTS[@]}"; do [ "$r" = failed ] && n=$((n + 1)); done
  echo "$n"
}
# The report's "Steps" and "Figures" sections, and its commands (markdown).
report_steps_and_figures() {
  local i
  echo "## Steps"
  echo
  echo "| step | result | time (s) | note |"
  echo "|---|---|---|---|"
  for i in "${!STEP_IDS[@]}"; do
    echo "| ${STEP_IDS[$i]} | ${STEP_RESULTS[$i]} | ${STEP_TIMES[$i]} | ${STEP_NOTES[$i]//|/\\|} |"
  done
  echo
  echo "## Figures"
  echo
  echo "| what | value |"
  echo "|---|---|"
  printf '%s\n' "${FIGURES[@]}"
}
report_commands() {
  local i
  for i in "${!STEP_IDS[@]}"; do [ -n "${STEP_CMDS[$i]}" ] && echo "# ${STEP_IDS[$i]}: ${STEP_CMDS[$i]}"; done
}

# Shared libraries the GPU machine brings itself, so the pack leaves them
# out (tools/gpu_pack.sh) and the check accepts them from outside it:
# glibc, and NVIDIA's (PyTorch's wheels there have the same sonames).
is_glibc() { [[ $1 =~ ^(libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|ld-linux-x86-64)\.so ]]; }
is_nvidia() { [[ $1 =~ ^lib(cuda|cudart|cublas|cublasLt|cudnn.*|nccl|nvrtc.*|nvJitLink|cupti|cufft|curand|cusolver|cusparse|nvidia-.*)\.so ]]; }
result_of() {  # id -> its result ("" when it never ran)
  local i
  for i in "${!STEP_IDS[@]}"; do [ "${STEP_IDS[$i]}" = "$1" ] && { echo "${STEP_RESULTS[$i]}"; return; }; done
}

# JSON helpers (python3 is on every machine this runs on).
json_get() {  # FILE KEY: the value, or "" (reads the last line that is a JSON object)
  python3 - "$1" "$2" <<'PY' 2>/dev/null
import json, sys
value = None
try:
    lines = [l for l in open(sys.argv[1]) if l.strip().startswith("{")]
    value = json.loads(lines[-1]).get(sys.argv[2]) if lines else None
except OSError:
    pass
print("" if value is None else value)
PY
}
json_first() {  # FILE KEY: the value in the first JSON line
  python3 -c 'import json,sys
l=[x for x in open(sys.argv[1]) if x.strip().startswith("{")]
print(json.loads(l[0]).get(sys.argv[2], "") if l else "")' "$1" "$2" 2>/dev/null
}
calc() { python3 -c "import math; print($1)" 2>/dev/null; }

