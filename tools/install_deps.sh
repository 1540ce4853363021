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
  libcpp-httplib-dev prometheus python3-pip
  xz-utils binutils libssl-dev libbrotli-dev libopenblas-pthread-dev
  # The fuzz targets (tests/fuzz/): clang and its libFuzzer and sanitizer
  # runtimes; without them the build skips the targets.
  clang libclang-rt-14-dev
  # The image datasets: libjpeg-turbo's libjpeg API (cropped, DCT-scaled
  # decoding; Note [Decoding only the crop]) and libpng; the test photographs
  # are made from python3-sklearn's and python3-skimage's samples with PIL.
  libjpeg62-turbo-dev libpng-dev python3-pil python3-sklearn python3-skimage
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages already installed"
elif [ "$(id -u)" -ne 0 ]; then
  echo "install_deps: missing packages (${missing[*]}); run this script as root" >&2
  exit 1
else
  echo "install_deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "install_deps: note: no CUDA toolkit at /usr/local/cuda; libddp builds CPU-only"
elif ! /usr/bin/python3 -c "import cudnn" 2>/dev/null; then
  # PyPI: the cuDNN frontend, header-only C++ over cuDNN's graph API, which
  # libddp's cuDNN layers are written against (cmake/FindCudnnFrontend.cmake
  # finds its include/ beside the Python package). Only a CUDA build needs it.
  if [ "$(id -u)" -ne 0 ]; then
    echo "install_deps: the Python package nvidia-cudnn-frontend is missing; run this script as root" >&2
    exit 1
  fi
  echo "install_deps: installing nvidia-cudnn-frontend from PyPI"
  /usr/bin/python3 -m pip install --quiet --break-system-packages --root-user-action=ignore \
    --no-deps "nvidia-cudnn-frontend>=1.12,<2"
fi

# PyPI: nvJPEG (header and library) of the toolkit's CUDA version, for the
# optional GPU decoder of the image datasets (DDP_WITH_NVJPEG,
# cmake/DdpNvjpeg.cmake finds the header in the wheel; libddp opens the
# library at run time). CUDA 13's wheel is nvidia-nvjpeg 13.x, CUDA 12's
# nvidia-nvjpeg-cu12 12.x.
if [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda_ver=$(/usr/local/cuda/bin/nvcc --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
  nvjpeg_wheel=nvidia-nvjpeg
  [ "${cuda_ver%%.*}" = 12 ] && nvjpeg_wheel=nvidia-nvjpeg-cu12
  if [ -n "$cuda_ver" ] && ! /usr/bin/python3 -m pip show "$nvjpeg_wheel" > /dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
      echo "install_deps: the Python package $nvjpeg_wheel is missing; run this script as root" >&2
      exit 1
    fi
    echo "install_deps: installing $nvjpeg_wheel==$cuda_ver.* from PyPI"
    /usr/bin/python3 -m pip install --quiet --break-system-packages --root-user-action=ignore \
      --no-deps "$nvjpeg_wheel==$cuda_ver.*"
  fi
fi

# PyPI: TensorBoard, whose event reader tests/metrics/tensorboard_readback.py
# uses to check the trainers' event files. Installed for Debian's
# /usr/bin/python3 (the interpreter CTest runs), system-wide, hence
# --break-system-packages (Debian 12 marks its Python externally managed).
if ! /usr/bin/python3 -c "import tensorboard" 2>/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install_deps: the Python package tensorboard is missing; run this script as root" >&2
    exit 1
  fi
  echo "install_deps: installing tensorboard from PyPI"
  /usr/bin/python3 -m pip install --quiet --break-system-packages --root-user-action=ignore \
    "tensorboard>=2.14,<3"
fi
