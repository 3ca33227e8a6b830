#!/usr/bin/env bash
# Stages a built tree for the GPU acceptance kit, so that a GPU machine lent by the minute spends none of them
# building: the kit's executables, stripped, in the build tree's layout, and the Debian libraries they load that a
# GPU machine's image may lack (Cap'n Proto 0.9, fmt 9, toml++ 3, libuv), in one archive .gpu-kit.tar.gz
# (git-ignored). The build must be x86-64, made with the CUDA release the GPU machine's driver supports, against a
# glibc no newer than the GPU machine's (Debian 12's 2.36 runs on Ubuntu 24.04's 2.39).
#
#   scripts/gpu-prebuilt.sh [BUILD_DIR]     # here; then carry .gpu-kit.tar.gz to the GPU machine and run there:
#   tar -xzf .gpu-kit.tar.gz && PREBUILT=.gpu-kit scripts/gpu-acceptance.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
kit=.gpu-kit
rm -rf "$kit" .gpu-kit.tar.gz
mkdir -p "$kit/runtime"

# The executables the kit runs (scripts/gpu-acceptance.sh), by directory of the build tree.
stage_dir() {  # stage_dir DIR: every executable regular file directly in DIR (not CMake's own files).
  local dir=$1
  mkdir -p "$kit/build/$dir"
  find "$build/$dir" -maxdepth 1 -type f \( -perm -u+x -o -name '*.fatbin' \) -print0 |
    while IFS= read -r -d '' f; do
      cp "$f" "$kit/build/$dir/"
      strip --strip-debug "$kit/build/$dir/$(basename "$f")" 2>/dev/null || true
    done
}
for dir in tools examples tests/remote/programs tests/interpose/remote lib/gpupool/cuda; do stage_dir "$dir"; done
# The kit's own probes (tests/gpu/*.cu: its open questions, the texture unit's weights), built here too so that the
# GPU machine compiles nothing.
mkdir -p "$kit/build/tests/gpu"
for probe in tests/gpu/*.cu; do
  nvcc -O2 -o "$kit/build/tests/gpu/$(basename "$probe" .cu)" "$probe" -lcuda
done
# The library symlinks (libcuda.so -> libcuda.so.1) as they are.
find "$build/lib/gpupool/cuda" -maxdepth 1 -type l -exec cp -a {} "$kit/build/lib/gpupool/cuda/" \;

# The shared libraries gpupool loads that are Debian's build of a version a GPU image may not have.
for lib in $(ldd "$build"/tools/gp-* "$build/lib/gpupool/cuda/libcuda.so.1" | awk '/=>/ {print $3}' | sort -u); do
  case $(basename "$lib") in
    libcapnp*|libkj*|libfmt*|libtomlplusplus*|libuv*) cp -L "$lib" "$kit/runtime/" ;;
  esac
done
tar -czf .gpu-kit.tar.gz "$kit"
echo "gpu-prebuilt: $(find "$kit/build" -type f | wc -l) files, $(ls "$kit/runtime" | wc -l) libraries;" \
  ".gpu-kit.tar.gz is $(du -h .gpu-kit.tar.gz | cut -f1)"
