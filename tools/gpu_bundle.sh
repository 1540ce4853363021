#!/usr/bin/env bash
# Packs the Debian libraries libddp needs but the GPU machine lacks (fmt,
# OpenBLAS, GoogleTest, oneDNN, Gloo and their runtime dependencies), the
# cuDNN frontend's headers, and the
# data the GPU checks train on (Fashion-MNIST, 30 MB; fortunes-min's text for
# train_gpt) into .gpu/deps.tar.gz, to travel with `device run ...
# carry=[".gpu"]`. tools/gpu_check.sh unpacks and uses it by itself.
# On the GPU machine:
#   mkdir -p /tmp/deps && tar xzf .gpu/deps.tar.gz -C /tmp/deps
#   export CMAKE_PREFIX_PATH=/tmp/deps/usr LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:/tmp/deps/usr/lib
#   cmake -S . -B build -G Ninja -DDDP_CUDA_ARCHS=90 -DDDP_WITH_MPI=OFF \
#     -DOpenBLAS_ROOT=/tmp/deps/usr -DDNNL_ROOT=/tmp/deps/usr ...
# (see docs/gpu-runs.md). Static libraries (but GoogleTest's) are left out to stay well under the
# device tool's 64 MiB carry limit. Open MPI is not packed: it needs its own
# prefix and helper programs; GPU runs test the mpi backend only where the
# machine has it.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >> "$exclude"
pkgs=(libfmt-dev libfmt9 libopenblas-dev libopenblas0 libopenblas0-pthread libopenblas-pthread-dev
      libgtest-dev libdnnl-dev libdnnl2 libgloo-dev libgloo0 libhiredis0.14 libibverbs1
      libnl-3-200 libnl-route-3-200
      dataset-fashion-mnist fortunes-min)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/root"
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    { echo "gpu_bundle: $p is not installed (run tools/install_deps.sh)" >&2; exit 1; }
  dpkg -L "$p" | while read -r f; do
    [ -f "$f" ] || [ -L "$f" ] || continue
    case "$f" in
      */libgtest*.a|*/libgmock*.a) ;;  # GoogleTest ships static libraries only
      *.a|/usr/share/doc/*|/usr/share/man/*|/usr/share/lintian/*) continue ;;
    esac
    mkdir -p "$work/root$(dirname "$f")"
    cp -a "$f" "$work/root$f"
  done
done
# The cuDNN frontend (header-only; PyPI wheel nvidia-cudnn-frontend, which
# tools/install_deps.sh installs on a CUDA machine): its include/ folder.
fe_inc=$(/usr/bin/python3 -c "import cudnn, os; print(os.path.join(os.path.dirname(os.path.dirname(cudnn.__file__)), 'include'))" 2>/dev/null) ||
  { echo "gpu_bundle: the cuDNN frontend wheel is not installed (run tools/install_deps.sh)" >&2; exit 1; }
mkdir -p "$work/root/cudnn_frontend/include"
cp -a "$fe_inc"/cudnn_frontend* "$fe_inc"/cudnn_backend_base.h "$work/root/cudnn_frontend/include/"
mkdir -p .gpu
tar czf .gpu/deps.tar.gz -C "$work/root" .
echo "gpu_bundle: .gpu/deps.tar.gz ($(du -h .gpu/deps.tar.gz | cut -f1))"
# The device tool carries at most 64 MiB: the bundle plus the working tree.
tree_bytes=$(git ls-files -z | xargs -0 cat | wc -c)
total=$(( $(stat -c %s .gpu/deps.tar.gz) + tree_bytes ))
[ "$total" -lt $((64 << 20)) ] ||
  echo "gpu_bundle: warning: bundle + tracked files = $((total >> 20)) MiB, over the 64 MiB a run carries" >&2
