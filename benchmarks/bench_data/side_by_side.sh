#!/usr/bin/env bash
# bench_data beside PyTorch's DataLoader + torchvision ImageFolder (PIL) on the
# same photographs, the same machine and the same worker counts, one after the
# other in rounds (so a change in the machine's load hits both), plus the
# packed format. Writes OUT/*.json and prints one table row per run.
#
#   benchmarks/bench_data/side_by_side.sh BUILD_DIR OUT [ROUNDS]
#
# The folder: 10 classes x 60 photographs (about 500 x 375, JPEG q75-95) made
# by tools/image_data/make_image_folder.py; packed with tools/pack_images.
set -euo pipefail
build=$1
out=$2
rounds=${3:-2}
here=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
photos=$out/photos
packed=$out/photos_packed
[ -d "$photos" ] || /usr/bin/python3 "$here/tools/image_data/make_image_folder.py" "$photos" \
  --classes 10 --per-class 60 > /dev/null
[ -d "$packed" ] || "$build/tools/pack_images/pack_images" --shards 2 --max-side 500 --quality 90 \
  "$photos" "$packed" > /dev/null
common=(--batch-size 32 --steps 30 --warmup 3)
row() {  # name json
  /usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[2])); print(f\"{sys.argv[1]:<32} {j['workers']:>3} {j['images_per_s']:>10.1f} {j['peak_rss_mib']:>10.1f} {j.get('peak_pss_mib', j['peak_rss_mib']):>10.1f}\")" "$1" "$2"
}
printf '%-32s %3s %10s %10s %10s\n' run wrk images/s rss_MiB pss_MiB
for r in $(seq 1 "$rounds"); do
  for w in 1 2; do
    "$build/benchmarks/bench_data/bench_data" --data "imagefolder:$photos" --workers $w "${common[@]}" \
      --json "$out/libddp_folder_w${w}_r$r.json" > /dev/null
    row "libddp imagefolder (r$r)" "$out/libddp_folder_w${w}_r$r.json"
    /usr/bin/python3 "$here/benchmarks/reference/bench_data.py" --data "imagefolder:$photos" \
      --workers $w "${common[@]}" --json "$out/torch_folder_w${w}_r$r.json" > /dev/null
    row "torch ImageFolder+PIL (r$r)" "$out/torch_folder_w${w}_r$r.json"
    "$build/benchmarks/bench_data/bench_data" --data "packed:$packed" --workers $w "${common[@]}" \
      --json "$out/libddp_packed_w${w}_r$r.json" > /dev/null
    row "libddp packed (r$r)" "$out/libddp_packed_w${w}_r$r.json"
  done
done
