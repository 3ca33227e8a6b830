#!/usr/bin/env bash
# managed_bench: host and device work alternating on managed memory, against the same loop with explicit copies,
# measured in the same run (bench/kernels/managed_bench.cu), on a private agent with one emulated device; then the
# bytes gpupool moved per step (GPUPOOL_MANAGED_STATS) against the bytes the host dirtied.
#
#   bench/managed_bench.sh [BUILD_DIR] [MIB] [STEPS] [STRIDE...]     (default: build, 16, 5, strides 1 and 4096)
#   STRIDE 1: the host rewrites the whole array each step; 4096: one int in 4096 (one page in four).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR="${1:-build}"
MIB="${2:-16}"
STEPS="${3:-5}"
shift $(($# < 3 ? $# : 3))
STRIDES=("${@:-1}")
[[ $# -gt 0 ]] || STRIDES=(1 4096)
RUN="$BUILD_DIR/tools/gp-run"
BENCH="$BUILD_DIR/bench/managed_bench"
source bench/lib/private_agent.sh
require_built managed_bench "$BUILD_DIR/tools/gp-agent" "$RUN" "$BENCH"
start_private_agent "$BUILD_DIR" managed_bench --emu 1 --emu-memory 2GiB
for stride in "${STRIDES[@]}"; do
  out=$(GPUPOOL_MANAGED_STATS=1 "$RUN" --servers "$private_agent_socket" -- "$BENCH" "$MIB" "$STEPS" "$stride" 2>&1)
  grep -v "^gpupool: managed memory:\|^steps counted\|^dirtied bytes\|^dirtied pages" <<<"$out"
  counted=$(sed -n 's/^steps counted by gpupool: //p' <<<"$out")
  dirtied=$(sed -n 's/^dirtied bytes per step: //p' <<<"$out")
  pages=$(sed -n 's/^dirtied pages per step: //p' <<<"$out")
  read -r to_device to_host faults < <(sed -n \
    's/^gpupool: managed memory: \([0-9]*\) bytes to the device, \([0-9]*\) bytes from it, \([0-9]*\) faults/\1 \2 \3/p' <<<"$out")
  [[ -n ${to_device:-} && -n $counted ]] || { echo "managed_bench: no figures from gpupool:" >&2; echo "$out" >&2; exit 1; }
  awk -v d="$to_device" -v h="$to_host" -v f="$faults" -v s="$counted" -v w="$dirtied" -v p="$pages" 'BEGIN {
    printf "moved per step: %.0f bytes to the device (%.2f x the bytes dirtied, %.2f x their 4 KiB pages), " \
           "%.0f bytes back, %.0f faults\n\n", d / s, d / s / w, d / s / (p * 4096), h / s, f / s }'
done
