#!/bin/bash
# ctest bench.scaling.cli.bad_input: run.sh and scaling_main refuse a bad
# --compute, --profile, --cluster-link-gbit, --priority-buckets, --overlap-chunk-mb,
# --overlap-issue-ratio, --trace-dir / --trace or --mode with exit status 2 and a
# message naming the flag, before any namespace is made (no root needed).
#
#   bad_input.sh SCALING_MAIN
set -u
here=$(cd "$(dirname "$0")" && pwd)
main=$1
tmp=$(mktemp -d /tmp/ddp_scaling_bad.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
printf '{"name": "x", "layers": [' > "$tmp/truncated.json"
printf '{"name": "x", "sample": "images", "samples_per_step": 1, "step_s": 1, "optimizer_s": 0}\n' \
  > "$tmp/no_layers.json"
fails=0
# expect FLAG CMD...: CMD must exit 2 and name FLAG on stderr
expect() {
  local flag=$1; shift
  "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$?
  if [ $rc -ne 2 ] || ! grep -q -- "$flag" "$tmp/err"; then
    echo "FAIL: '$*' exited $rc (want 2) with stderr:"; sed 's/^/    /' "$tmp/err"
    fails=$((fails + 1))
  else
    echo "ok: $* -> 2: $(head -1 "$tmp/err")"
  fi
}
run=("$here/run.sh" --main "$main" --nodes 2)
expect --compute "${run[@]}" --compute gpu
expect --profile "${run[@]}" --compute emulated --profile resnet5
expect --profile "${run[@]}" --compute emulated --profile "$tmp/truncated.json"
expect --profile "${run[@]}" --compute emulated --profile "$tmp/no_layers.json"
expect --profile "${run[@]}" --compute emulated --profile "$tmp/missing.json"
expect --profile "${run[@]}" --compute emulated --profile "$tmp"
expect --profile "${run[@]}" --compute emulated
for g in 0 -10 abc 1.2.3 "" .; do
  expect --cluster-link-gbit "${run[@]}" --compute emulated --profile resnet50 --cluster-link-gbit "$g"
done
expect --stretch "${run[@]}" --compute emulated --profile gpt2 --stretch 0
expect --stretch "${run[@]}" --compute emulated --profile gpt2 --stretch ""
expect --cluster-link-gbit "${run[@]}" --cluster-link-gbit 10
for k in 0 -1 x ""; do expect --priority-buckets "${run[@]}" --priority-buckets "$k"; done
expect --overlap-cap-mb "${run[@]}" --overlap-cap-mb 0
for c in -1 x ""; do expect --overlap-chunk-mb "${run[@]}" --overlap-chunk-mb "$c"; done
for r in 0 1.5 -0.5 x ""; do expect --overlap-issue-ratio "${run[@]}" --overlap-issue-ratio "$r"; done
expect --trace-dir "${run[@]}" --trace-dir "$tmp/traces"
expect --trace-dir "${run[@]}" --compute emulated --profile gpt2 --trace-dir "$tmp/no_layers.json"
# scaling_main checks the same before it joins a group
expect --compute "$main" --compute gpu
expect --profile "$main" --compute emulated --profile "$tmp/truncated.json"
expect --profile "$main" --compute emulated --profile "$tmp/no_layers.json"
expect --profile "$main" --compute emulated --profile "$tmp/missing.json"
expect --profile "$main" --compute emulated
expect --cluster-link-gbit "$main" --cluster-link-gbit -1
expect --priority-buckets "$main" --mode overlap --priority-buckets 0
expect --overlap-chunk-mb "$main" --mode overlap --overlap-chunk-mb -1
expect --overlap-issue-ratio "$main" --mode overlap --overlap-issue-ratio 0
expect --overlap-issue-ratio "$main" --mode overlap --overlap-issue-ratio 1.5
expect --trace "$main" --mode ddp --trace "$tmp/t.json"
expect --mode "$main" --mode bf17
expect --mode "$main" --mode zero1_overlap --compute emulated --profile "$here/profiles/resnet50.json"
[ $fails -eq 0 ] || { echo "FAIL: $fails cases"; exit 1; }
echo "OK: every bad input exited 2 naming its flag"
