#!/usr/bin/env bash
# gemm_bench: cuBLAS's SGEMM against the same product as a plain CUDA kernel on an emulated device, measured in the
# same run (bench/kernels/gemm_bench.cu). Starts a private agent with one emulated device of the default capability
# (12.1, to cuBLAS 13.0: it takes its forward-compatible PTX), runs the program under gp-run, and stops the agent.
#
#   bench/gemm_bench.sh [BUILD_DIR] [N] [REPEATS]     (default: build, 256, 3)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR="${1:-build}"
N="${2:-256}"
REPEATS="${3:-3}"
AGENT="$BUILD_DIR/tools/gp-agent"
RUN="$BUILD_DIR/tools/gp-run"
BENCH="$BUILD_DIR/bench/gemm_bench"
for f in "$AGENT" "$RUN" "$BENCH"; do
  [[ -x $f ]] || { echo "gemm_bench: $f is missing: build the tree first" >&2; exit 1; }
done
dir=$(mktemp -d "${TMPDIR:-/tmp}/gpupool-gemm-bench-XXXXXX")
agent_pid=
cleanup() {
  [[ -n $agent_pid ]] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
"$AGENT" --no-nvml --emu 1 --emu-memory 2GiB --listen "unix:$dir/a.sock" >"$dir/a.out" 2>"$dir/a.err" &
agent_pid=$!
for _ in $(seq 1 100); do
  grep -q "listening on" "$dir/a.out" 2>/dev/null && break
  kill -0 "$agent_pid" 2>/dev/null || { echo "gemm_bench: gp-agent exited:" >&2; cat "$dir/a.err" >&2; exit 1; }
  sleep 0.1
done
# The emulated device runs on every core of this host: per-core figures divide by them.
"$RUN" --servers "unix:$dir/a.sock" -- "$BENCH" "$N" "$REPEATS" "$(nproc)"
