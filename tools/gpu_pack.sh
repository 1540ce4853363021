#!/usr/bin/env bash
# Packs an existing CUDA build into one file that runs on the GPU machine
# without building there (issue 24): tools/gpu_check.sh --prebuilt PACK
# unpacks it, points the library path at it and runs every GPU check in one
# short call. See docs/gpu-runs.md.
#
#   tools/gpu_pack.sh [--build-dir build] [--out .gpu/pack.tar.xz] [--level 9]
#
# The pack holds:
#   build/     the build tree's gpu test executables, trainers, benchmarks and
#              tools (stripped), and its CTest files, at their relative paths
#   lib/       stripped libddp and every shared library the programs load
#              (ldd) except glibc and the NVIDIA libraries (CUDA runtime,
#              cuBLAS, cuDNN, NCCL, NVRTC: the GPU machine's PyTorch wheels
#              bring the same sonames); lib/fallback/ holds this machine's
#              libstdc++ and libgcc_s, used only where the GPU machine's are
#              older than the programs need
#   deps/      headers, pkg-config and CMake files of the libraries above and
#              the cuDNN frontend's headers, for gpu_check's fallback build
#              (the sources themselves travel as the working tree)
#   data/      a Fashion-MNIST subset (20,000 training and 2,000 test images)
#              and a few fortune files as text for train_gpt
#   scripts/   the PyTorch twins (benchmarks/reference)
#   MANIFEST   commit, CUDA architectures, the build's original paths, the
#              programs, and how each was chosen
#
# It refuses (exit 1, saying why) a folder that is not a CMake build tree, a
# build with CUDA off, a build that is not of HEAD (tracked files changed
# since the commit, or ninja has work left to do), and a pack over --max-mib.
#
# Options:
#   --build-dir DIR   the CUDA build tree (default: build)
#   --out FILE        the pack (default: .gpu/pack.tar.xz; .gpu/ is git-ignored
#                     locally by this script)
#   --level N         xz compression level, 0-9 (default 9; tests use 0)
#   --max-mib N       refuse a pack larger than this (default 56: the device
#                     tool carries 64 MiB in all, and the pack is most of it)
#   --allow-dirty     pack even when tracked files differ from HEAD (the
#                     MANIFEST then says dirty); for tests of a work tree
# Exit status: 0 when packed, 1 when refused, 2 for a bad command line.
set -euo pipefail

usage() { sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
die() { echo "gpu_pack: $*" >&2; exit 1; }

BUILD_DIR=build OUT_FILE=.gpu/pack.tar.xz LEVEL=9 MAX_MIB=56 ALLOW_DIRTY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD_DIR=${2:?--build-dir needs a folder}; shift ;;
    --out) OUT_FILE=${2:?--out needs a file}; shift ;;
    --level) LEVEL=${2:?--level needs 0-9}; shift ;;
    --max-mib) MAX_MIB=${2:?--max-mib needs a number}; shift ;;
    --allow-dirty) ALLOW_DIRTY=1 ;;
    -h|--help) usage 0 ;;
    *) echo "gpu_pack: unknown argument $1" >&2; usage 2 ;;
  esac
  shift
done
case "$LEVEL" in [0-9]) ;; *) echo "gpu_pack: --level must be 0-9" >&2; exit 2 ;; esac

ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(realpath -m "$BUILD_DIR")
OUT_FILE=$(realpath -m "$OUT_FILE")
cd "$ROOT"

# ---- refusals -------------------------------------------------------------------
[ -f "$B/CMakeCache.txt" ] || die "$B is not a CMake build tree (no CMakeCache.txt)"
LIBDDP=$(ls "$B"/src/libddp.so.*.*.* 2>/dev/null | head -n 1 || true)
[ -n "$LIBDDP" ] || die "$B has no built libddp (src/libddp.so.X.Y.Z): build it first"
grep -q '^#define DDP_HAVE_CUDA 1' "$B/include/ddp/config.h" 2>/dev/null ||
  die "$B was configured with CUDA off (include/ddp/config.h lacks DDP_HAVE_CUDA): the pack is for the GPU; configure with -DDDP_WITH_CUDA=ON"
COMMIT=$(git rev-parse HEAD)
DIRTY=$(git status --porcelain --untracked-files=no | head -n 20)
if [ -n "$DIRTY" ] && [ "$ALLOW_DIRTY" = 0 ]; then
  die "tracked files differ from HEAD ${COMMIT:0:12}, so the build is not of HEAD:
$DIRTY
commit them and rebuild (or pass --allow-dirty)"
fi
ARCHS=$(sed -n 's/^DDP_CUDA_ARCHS:[A-Z]*=//p' "$B/CMakeCache.txt")
SRC=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$B/CMakeCache.txt")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
P=$work/pack
mkdir -p "$P"/{build,lib/fallback,deps,data/fashion-mnist,data/text,scripts}

# ---- programs ----------------------------------------------------------------------
# gpu-labelled test executables (from CTest), and every program under
# examples/, benchmarks/ and tools/.
programs=()
while read -r exe; do
  case "$exe" in "$B"/*) [ -x "$exe" ] && programs+=("$exe") ;; esac
done < <(ctest --test-dir "$B" -N -L gpu --show-only=json-v1 2>/dev/null |
         python3 -c 'import json,sys
seen=set()
for t in json.load(sys.stdin).get("tests", []):
    c=t.get("command") or []
    if c and c[0] not in seen:
        seen.add(c[0]); print(c[0])')
while read -r exe; do
  [ "$(head -c 4 "$exe" | tail -c 3)" = ELF ] && programs+=("$exe")  # not scripts
done < <(find "$B/examples" "$B/benchmarks" "$B/tools" -type f -perm -u+x -not -path '*/CMakeFiles/*' 2>/dev/null)
mapfile -t programs < <(printf '%s\n' "${programs[@]}" | sort -u)
[ "${#programs[@]}" -gt 0 ] || die "no programs found in $B"
ls "$B"/tests/*_gpu > /dev/null 2>&1 || die "$B has no gpu test executables (tests/*_gpu): configure with tests on"

# A build of another commit, or of sources edited since, has ninja work left
# for the programs packed. (A dry run always lists CMake's glob check and the
# re-run it would trigger, since it cannot know the check's outcome: those two
# are judged instead by whether any CMake file is newer than build.ninja.)
if [ -f "$B/build.ninja" ]; then
  stale=$(git ls-files -z -- '*CMakeLists.txt' '*.cmake' '*.cmake.in' | xargs -0 -I{} find {} -newer "$B/build.ninja" | head -n 3)
  [ -z "$stale" ] || die "CMake files changed since $B was configured ($(echo $stale)): run cmake --build $BUILD_DIR"
  targets=("${LIBDDP#"$B"/}")
  for exe in "${programs[@]}"; do targets+=("${exe#"$B"/}"); done
  todo=$(ninja -C "$B" -n "${targets[@]}" 2>&1 | grep -E '^\[[0-9]+/[0-9]+\]' |
         grep -vE 'Re-checking globbed directories|Re-running CMake' || true)
  [ -z "$todo" ] || die "the build in $B is not of the sources at HEAD ${COMMIT:0:12}: ninja has $(echo "$todo" | wc -l) step(s) left for the packed programs, e.g.
$(echo "$todo" | head -n 3)
run: cmake --build $BUILD_DIR"
fi

for exe in "${programs[@]}"; do
  rel=${exe#"$B"/}
  mkdir -p "$P/build/$(dirname "$rel")"
  strip --strip-unneeded -o "$P/build/$rel" "$exe"
done
# libddp under its soname, stripped.
soname=$(objdump -p "$LIBDDP" | awk '/SONAME/ {print $2}')
strip --strip-unneeded -o "$P/lib/$soname" "$LIBDDP"
ln -s "$soname" "$P/lib/libddp.so"
# libddp_cuda.so beside it: libddp opens it from its own directory when CUDA
# is first needed (Note [Loading CUDA when first used]).
LIBDDP_CUDA=""
if [ -f "$B/src/libddp_cuda.so" ]; then
  LIBDDP_CUDA="$B/src/libddp_cuda.so"
  strip --strip-unneeded -o "$P/lib/libddp_cuda.so" "$LIBDDP_CUDA"
fi

# CTest's files (gtest discovery lists included), for `ctest -L gpu` there.
(cd "$B" && find . -path ./_deps -prune -o \( -name CTestTestfile.cmake -o -name '*_include.cmake' \
   -o -name '*_tests.cmake' \) -not -path '*/CMakeFiles/*' -print) | while read -r f; do
  mkdir -p "$P/build/$(dirname "$f")"
  cp "$B/$f" "$P/build/$f"
done

# ---- shared libraries ------------------------------------------------------------------
# Which libraries stay behind: glibc and NVIDIA's (is_glibc, is_nvidia in
# tools/gpu_check/common.sh). libstdc++/libgcc_s go to lib/fallback/.
source "$ROOT/tools/gpu_check/common.sh"
declare -A packed=()
for exe in "${programs[@]}" "$LIBDDP" $LIBDDP_CUDA; do
  while read -r name path; do
    [ -n "$path" ] && [ -f "$path" ] || continue
    is_glibc "$name" && continue
    is_nvidia "$name" && continue
    [[ $name == libddp.so* || $name == libddp_cuda.so ]] && continue
    [ -n "${packed[$name]:-}" ] && continue
    packed[$name]=$path
    case "$name" in
      libstdc++.so*|libgcc_s.so*) cp -L "$path" "$P/lib/fallback/$name" ;;
      *) cp -L "$path" "$P/lib/$name" ;;
    esac
  done < <(ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
done
# libnvjpeg (about 3 MiB of the pack): libddp opens it at first use (Note
# [Loading nvJPEG]), so ldd does not list it, and PyTorch's wheels do not
# bring it. It goes to lib/, which gpu_check puts on the library path.
if grep -q -- '-DDDP_HAVE_NVJPEG=1' "$B/build.ninja" 2>/dev/null; then
  nvjpeg_inc=$(sed -n 's/^NVJPEG_INCLUDE_DIR:PATH=//p' "$B/CMakeCache.txt")
  nvjpeg=$(ls "$nvjpeg_inc"/../lib/libnvjpeg.so.[0-9]* "$nvjpeg_inc"/../lib64/libnvjpeg.so.[0-9]* 2>/dev/null |
           head -n 1 || true)
  if [ -n "$nvjpeg" ]; then
    name=$(objdump -p "$(realpath "$nvjpeg")" | awk '/SONAME/ {print $2}')
    cp -L "$nvjpeg" "$P/lib/$name"
    packed[$name]=$(realpath "$nvjpeg")
  else
    echo "gpu_pack: note: the build has the nvJPEG decoder but no libnvjpeg was found beside $nvjpeg_inc: not packed" >&2
  fi
fi

# ---- the fallback build's headers --------------------------------------------------------
# Headers, pkg-config and CMake files of the build's dependencies; their
# shared-library links point at lib/ (relative), static GoogleTest is copied.
dev_pkgs=(libfmt-dev libopenblas-dev libopenblas-pthread-dev libdnnl-dev libgloo-dev libgtest-dev
          libcli11-dev nlohmann-json3-dev libcpp-httplib-dev zlib1g-dev libssl-dev libbrotli-dev)
for p in "${dev_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    die "$p is not installed (run tools/install_deps.sh)"
  dpkg -L "$p" | while read -r f; do
    [ -f "$f" ] || [ -L "$f" ] || continue
    case "$f" in
      /usr/share/doc/*|/usr/share/man/*|/usr/share/lintian/*) continue ;;
      */libgtest*.a|*/libgmock*.a) ;;
      *.a) continue ;;
    esac
    d="$P/deps$(dirname "$f")"
    mkdir -p "$d"
    if [[ $f == *.so || $f == *.so.* ]]; then
      target=$(objdump -p "$(realpath "$f")" 2>/dev/null | awk '/SONAME/ {print $2}')
      if [ -n "$target" ] && [ -f "$P/lib/$target" ]; then
        ln -sf "$(realpath -m --relative-to="$d" "$P/lib/$target")" "$d/$(basename "$f")"
      elif [ -n "$target" ]; then
        # A library the programs do not load (e.g. libgloo is static-free but
        # unused): copy it so the fallback links.
        cp -L "$f" "$d/$(basename "$f")"
      fi
    else
      cp -a "$f" "$d/"
    fi
  done
done
fe_inc=$(/usr/bin/python3 -c "import cudnn, os; print(os.path.join(os.path.dirname(os.path.dirname(cudnn.__file__)), 'include'))" 2>/dev/null) ||
  die "the cuDNN frontend wheel is not installed (run tools/install_deps.sh)"
mkdir -p "$P/deps/cudnn_frontend/include"
cp -a "$fe_inc"/cudnn_frontend* "$fe_inc"/cudnn_backend_base.h "$P/deps/cudnn_frontend/include/"

# ---- data, scripts --------------------------------------------------------------------------
# The first 20,000 training and 2,000 test images, as plain IDX (xz
# compresses them better than gzip does).
FM=/usr/share/datasets/fashion-mnist
[ -f "$FM/train-images-idx3-ubyte.gz" ] || die "no Fashion-MNIST in $FM (dataset-fashion-mnist)"
python3 - "$FM" "$P/data/fashion-mnist" <<'PY'
import gzip, struct, sys
src, dst = sys.argv[1], sys.argv[2]
for split, n in (("train", 20000), ("t10k", 2000)):
    for kind, rank in (("images-idx3", 3), ("labels-idx1", 1)):
        raw = gzip.open(f"{src}/{split}-{kind}-ubyte.gz").read()
        dims = list(struct.unpack(">" + "I" * rank, raw[4:4 + 4 * rank]))
        per = 1
        for d in dims[1:]:
            per *= d
        body = raw[4 + 4 * rank:4 + 4 * rank + n * per]
        dims[0] = n
        with open(f"{dst}/{split}-{kind}-ubyte", "wb") as f:
            f.write(raw[:4] + struct.pack(">" + "I" * rank, *dims) + body)
PY
for f in computers science fortunes; do
  [ -f "/usr/share/games/fortunes/$f" ] && cp "/usr/share/games/fortunes/$f" "$P/data/text/$f.txt"
done
ls "$P"/data/text/*.txt > /dev/null 2>&1 || cp "$ROOT"/docs/*.md "$P/data/text/"
cp "$ROOT"/benchmarks/reference/*.py "$P/scripts/"

# ---- manifest and archive ---------------------------------------------------------------------
{
  echo "commit $COMMIT"
  echo "dirty $([ -n "$DIRTY" ] && echo yes || echo no)"
  echo "date $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
  echo "cuda_archs $ARCHS"
  echo "build_dir $B"
  echo "source_dir $SRC"
  echo "compiler $(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$B/CMakeCache.txt") $(gcc -dumpfullversion 2>/dev/null)"
  echo "nvcc $(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$B/CMakeCache.txt")"
  echo "cmake_command $(sed -n 's/^CMAKE_COMMAND:INTERNAL=//p' "$B/CMakeCache.txt")"
  for exe in "${programs[@]}"; do echo "program ${exe#"$B"/}"; done
  for name in $(printf '%s\n' "${!packed[@]}" | sort); do echo "library $name ${packed[$name]}"; done
} > "$P/MANIFEST"

mkdir -p "$(dirname "$OUT_FILE")"
case "$OUT_FILE" in "$ROOT"/.gpu/*)
  exclude=$(git rev-parse --git-path info/exclude)
  grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >> "$exclude" ;;
esac
XZ_OPT="-$LEVEL -T0" tar -cJf "$OUT_FILE.tmp" -C "$work" pack
mv "$OUT_FILE.tmp" "$OUT_FILE"
bytes=$(stat -c %s "$OUT_FILE")
mib=$(python3 -c "print(f'{$bytes / 2**20:.1f}')")
echo "gpu_pack: $OUT_FILE: $mib MiB (xz -$LEVEL), ${#programs[@]} programs, ${#packed[@]} libraries, commit ${COMMIT:0:12}$([ -n "$DIRTY" ] && echo ' (dirty)'), archs $ARCHS"
if [ "$bytes" -gt $((MAX_MIB << 20)) ]; then
  rm -f "$OUT_FILE"
  die "the pack is $mib MiB, over --max-mib $MAX_MIB: removed"
fi
