#!/usr/bin/env bash
# export-table-survey.sh [BUILD_DIR] [LIBRARY...]: runs one call into each NVIDIA library under gp-run (the embedded
# default: an emulated slice) with GPUPOOL_LOG=debug, and lists the private export tables it asked gpupool's
# libcuda.so.1 for (served or not), the slots gpupool refused, and the library's status. A new CUDA release's
# libraries asking for a table or slot gpupool does not serve show up here first (issue 48).
# Default libraries: cublas cublaslt cufft curand cusparse cusolver nvrtc nvjitlink, and torch (cuDNN, NCCL) and
# cupy when the Python tests' environment (BUILD_DIR/python-venv) is there.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
shift || true
libs=("$@")
((${#libs[@]})) || libs=(cublas cublaslt cufft curand cusparse cusolver nvrtc nvjitlink torch cupy)
gp_run=$build/tools/gp-run
[[ -x $gp_run ]] || { echo "export-table-survey: $gp_run is missing: build the tree first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nvcc -O0 -o "$work/survey" "$root/scripts/export_table_survey.cu" -lcublasLt -lcublas -lcufft -lcurand -lcusolver \
  -lcusparse -lnvJitLink -lnvrtc 2>"$work/nvcc.err" || { cat "$work/nvcc.err" >&2; exit 1; }
python=$build/python-venv/bin/python
for lib in "${libs[@]}"; do
  case $lib in
    torch) [[ -x $python ]] || { echo "== torch: no $python (run the Python tests once)"; continue; }
      cmd=("$python" -c "import torch
x = torch.empty(8, 8, device='cuda')  # No kernel: torch's are SASS only.
print('torch: cudnn', torch.backends.cudnn.version(), 'nccl', torch.cuda.nccl.version())
try:
    torch.nn.functional.conv2d(torch.empty(1, 1, 8, 8, device='cuda'), torch.empty(1, 1, 3, 3, device='cuda'))
except Exception as e:
    print('torch: conv2d:', str(e).splitlines()[0][:120])")
      ;;
    cupy) [[ -x $python ]] || { echo "== cupy: no $python (run the Python tests once)"; continue; }
      cmd=(env CUDA_PATH="${CUDA_HOME:-/usr/local/cuda}" CUPY_COMPILE_WITH_PTX=1 "$python" -c "import cupy as cp
a = cp.arange(64, dtype=cp.float32)
print('cupy: sum', float(a.sum()))
try:
    print('cupy: fft', cp.fft.fft(a)[0])
except Exception as e:
    print('cupy: fft:', str(e).splitlines()[0][:120])")
      ;;
    *) cmd=("$work/survey" "$lib") ;;
  esac
  GPUPOOL_LOG=debug "$gp_run" -q -- "${cmd[@]}" >"$work/out" 2>"$work/err" || true
  echo "== $lib: $(grep -h "^$lib: " "$work/out" | tr '\n' ' ')"
  sed -nE 's/.*cuGetExportTable\(([0-9a-f]{32})( = ([a-z_]+))?\) -> ([A-Z_]+).*/  table \1 \3 \4/p' "$work/err" | sort | uniq
  sed -nE 's/.*warn interpose: (.* private export table .*)/  \1/p' "$work/err" | sort | uniq
done
