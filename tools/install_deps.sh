#!/usr/bin/env bash
# Installs libddp's build and test dependencies from Debian 12 packages.
# Idempotent: packages already present are skipped by apt-get. Run as root.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libopenmpi-dev openmpi-bin
  libfmt-dev libopenblas-dev libdnnl-dev libgloo-dev libgtest-dev zlib1g-dev
  libcli11-dev nlohmann-json3-dev
  iproute2
  python3
  dataset-fashion-mnist fortunes
  python3-matplotlib
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages already installed"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install_deps: missing packages (${missing[*]}); run this script as root" >&2
  exit 1
fi

echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"

if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "install_deps: note: no CUDA toolkit at /usr/local/cuda; libddp builds CPU-only"
fi
