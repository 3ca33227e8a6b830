#!/usr/bin/env bash
# ptx-survey.sh [BUILD_DIR] [LIBRARY...]: extracts every PTX image NVIDIA's libraries carry and loads each on an
# emulated device (bench/ptx_survey), printing per library how many load and why the others are refused.
# Default libraries: cublas cublasLt cusparse curand cusolver, from $CUDA_HOME/lib64 (else /usr/local/cuda/lib64).
# Needs cuobjdump: the toolkit's, else the one Triton's wheel ships (the Python tests' environment has it).
# Environment: PTX_SURVEY_CC (default 12.1), PTX_SURVEY_DIR (where the images go; default a temporary folder).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
shift || true
libs=("$@")
((${#libs[@]})) || libs=(cublas cublasLt cusparse curand cusolver)
survey=$build/bench/ptx_survey
[[ -x $survey ]] || { echo "ptx-survey: $survey is missing: build the tree first" >&2; exit 1; }
cuda=${CUDA_HOME:-/usr/local/cuda}
cuobjdump=$(command -v cuobjdump || true)
[[ -n $cuobjdump ]] || cuobjdump=$(ls "$cuda"/bin/cuobjdump "$build"/python-venv/lib/python3*/site-packages/triton/backends/nvidia/bin/cuobjdump 2>/dev/null | head -1 || true)
[[ -x $cuobjdump ]] || { echo "ptx-survey: no cuobjdump (install the CUDA toolkit's, or run the Python tests once)" >&2; exit 1; }
out=${PTX_SURVEY_DIR:-$(mktemp -d)}
for lib in "${libs[@]}"; do
  file=$(ls "$cuda"/lib64/lib"$lib".so.* 2>/dev/null | sort | head -1)
  [[ -n $file ]] || { echo "== $lib: not found in $cuda/lib64"; continue; }
  mkdir -p "$out/$lib"
  (cd "$out/$lib" && "$cuobjdump" -xptx all "$file" >/dev/null 2>&1) || true
  shopt -s nullglob
  images=("$out/$lib"/*.ptx)
  shopt -u nullglob
  echo "== $lib ($(basename "$file")): ${#images[@]} PTX images"
  ((${#images[@]})) && "$survey" --cc "${PTX_SURVEY_CC:-12.1}" "${images[@]}"
done
