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
RUN="$BUILD_DIR/tools/gp-run"
BENCH="$BUILD_DIR/bench/gemm_bench"
source bench/lib/private_agent.sh
require_built gemm_bench "$BUILD_DIR/tools/gp-agent" "$RUN" "$BENCH"
start_private_agent "$BUILD_DIR" gemm_bench --emu 1 --emu-memory 2GiB
# The emulated device runs on every core of this host: per-core figures divide by them.
"$RUN" --servers "$private_agent_socket" -- "$BENCH" "$N" "$REPEATS" "$(nproc)"
