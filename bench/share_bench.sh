#!/usr/bin/env bash
# share_bench: does `-p` buy compute? Tenants on one emulated GPU, each running back-to-back kernels of fixed work
# for the same wall time (tests/remote/programs/busy.cu); prints the share of the work each got while all ran,
# beside a baseline measured in the same run: the same program alone on the whole device and alone on a 0.25 slice
# (work-conserving: a tenant alone should get the whole device).
#
#   bench/share_bench.sh [BUILD_DIR] [SECONDS] [kernel|submission] [MIX]     (default: build, 6, kernel, pair)
# kernel: the emulated device takes turns per kernel, pausing running kernels at its checkpoints (how emulated
# devices are shared). submission: kernels of several sessions run at once and the session server throttles the
# submissions of a lease over its share, as it does for a physical GPU without MPS (GPUPOOL_EMU_SUBMISSION_TURNS=1
# in the agent's environment).
# MIX: pair: 0.75 and 0.25, one process each. crowd: 0.5 (one process) against one 0.05 lease used by 8 processes
# at once. burst: 0.5 against a 0.05 tenant whose session idles for SECONDS/2 before it runs. kernels: 0.5 against
# a 0.05 tenant of long kernels (each 20 times the others', ~0.15 s alone, back to back), counting the 0.5 tenant's
# work against its rate alone on the whole device. long: the same against a 0.05 tenant whose one kernel never ends
# (tests/remote/programs/spin).
# On the submission path a kernel that never ends cannot be held back once it runs: the device time-slices it
# equally with the neighbour's work (the 0.5 tenant gets about half), as a GPU without MPS does; on a GPU, MPS
# (which the agent uses when it runs) is what holds shares against such kernels.
# Run it on an otherwise idle machine: with the kernel's autogroup scheduling every other session's processes take
# an equal part of the CPUs (the emulated device's compute) whatever their nice value, and the figures are noise.
# Targets: contended shares within 5 points of the shares' ratio (pair 75 %, crowd and burst 0.5 / 0.55 = 90.9 %,
# kernels and long: the 0.5 tenant at >= 85.9 % of its rate alone); alone on 0.25 >= 90 % of alone on the whole device.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR="${1:-build}"
SECONDS_EACH="${2:-6}"
TURNS="${3:-kernel}"
MIX="${4:-pair}"
case "$MIX" in
  pair|crowd|burst|kernels|long) ;;
  *) echo "share_bench: the mix must be 'pair', 'crowd', 'burst', 'kernels' or 'long', not '$MIX'" >&2; exit 2 ;;
esac
case "$TURNS" in
  kernel) ;;
  submission) export GPUPOOL_EMU_SUBMISSION_TURNS=1 ;;
  *) echo "share_bench: turns must be 'kernel' or 'submission', not '$TURNS'" >&2; exit 2 ;;
esac
AGENT="$BUILD_DIR/tools/gp-agent"
RUN="$BUILD_DIR/tools/gp-run"
BUSY="$BUILD_DIR/tests/remote/programs/busy"
SPIN="$BUILD_DIR/tests/remote/programs/spin"
source bench/lib/private_agent.sh  # require_built
require_built share_bench "$AGENT" "$RUN" "$BUSY" "$SPIN"

out=$(mktemp -d)
trap 'kill $agent_pid 2>/dev/null; wait $agent_pid 2>/dev/null; rm -rf "$out"' EXIT
"$AGENT" --no-nvml --emu 1 --emu-memory 4GiB --listen 127.0.0.1:0 --name share-bench >"$out/agent.out" 2>"$out/agent.err" &
agent_pid=$!
for _ in $(seq 100); do grep -q listening "$out/agent.out" 2>/dev/null && break; sleep 0.1; done
server=$(sed -nE 's/.* listening on ([^ ]+) .*/\1/p' "$out/agent.out")
[[ -n "$server" ]] || { echo "share_bench: gp-agent did not start:" >&2; cat "$out/agent.err" >&2; exit 1; }

kernels() { sed -nE 's/^busy: ([0-9]+) kernels.*/\1/p' "$1"; }
run_busy() { "$RUN" --servers "$server" -p "$1" -- "$BUSY" "$SECONDS_EACH" trace >"$2"; }

echo "share_bench: $(nproc) CPU(s), ${SECONDS_EACH} s per run, one emulated GPU, turns per $TURNS, mix $MIX"
read -r load _ </proc/loadavg
if awk -v l="$load" -v n="$(nproc)" 'BEGIN { exit !(l > n / 2) }'; then
  echo "share_bench: note: the machine is busy (load average $load on $(nproc) CPUs): the figures are noisy" >&2
fi
run_busy 1 "$out/whole"
run_busy 0.25 "$out/alone"
case "$MIX" in
  pair)
    big_share=0.75 small_share=0.25
    run_busy 0.75 "$out/big" &
    big_pid=$!
    run_busy 0.25 "$out/small.0"
    ;;
  crowd)
    big_share=0.5 small_share=0.05
    run_busy 0.5 "$out/big" &
    big_pid=$!
    # One lease, eight processes: each opens a session of its own on the lease's slice.
    "$RUN" --servers "$server" -p 0.05 -- bash -c \
      'for i in 0 1 2 3 4 5 6 7; do "$0" "$1" trace >"$2.$i" & done; wait' "$BUSY" "$SECONDS_EACH" "$out/small"
    ;;
  burst)
    big_share=0.5 small_share=0.05
    run_busy 0.5 "$out/big" &
    big_pid=$!
    idle=$(awk -v s="$SECONDS_EACH" 'BEGIN { print s / 2 }')
    "$RUN" --servers "$server" -p 0.05 -- "$BUSY" "$SECONDS_EACH" trace "$idle" >"$out/small.0"
    ;;
  kernels)
    big_share=0.5 small_share=0.05
    # Longer than the measured tenant, so that its long kernels run throughout; ended once the measurement is done.
    "$RUN" --servers "$server" -p 0.05 -- "$BUSY" $((SECONDS_EACH * 3)) trace 0 20 >"$out/spin" &
    spin_pid=$!
    for _ in $(seq 600); do grep -q "busy: at" "$out/spin" 2>/dev/null && break; sleep 0.1; done
    sleep 0.5  # Its first kernels are running.
    run_busy 0.5 "$out/big"
    kill "$spin_pid" 2>/dev/null || true
    wait "$spin_pid" 2>/dev/null || true
    ;;
  long)
    big_share=0.5 small_share=0.05
    "$RUN" --servers "$server" -p 0.05 -- "$SPIN" >"$out/spin" &
    spin_pid=$!
    for _ in $(seq 600); do grep -q running "$out/spin" 2>/dev/null && break; sleep 0.1; done
    sleep 0.5  # Its kernel is running.
    run_busy 0.5 "$out/big"
    kill "$spin_pid" 2>/dev/null || true
    wait "$spin_pid" 2>/dev/null || true
    ;;
esac
[[ "$MIX" == long || "$MIX" == kernels ]] || wait $big_pid
whole=$(kernels "$out/whole") alone=$(kernels "$out/alone")
awk -v whole="$whole" -v alone="$alone" 'BEGIN {
  printf "baseline  alone on the whole GPU (-p 1):   %6d kernels\n", whole
  printf "alone     on a 0.25 slice:                 %6d kernels = %.1f %% of the baseline (target >= 90 %%: %s)\n",
         alone, 100 * alone / whole, (alone >= 0.9 * whole ? "MET" : "MISSED")
}'
if [[ "$MIX" == long || "$MIX" == kernels ]]; then
  big=$(kernels "$out/big")
  what="a 0.05 kernel that never ends"
  [[ "$MIX" == kernels ]] && what="a 0.05 tenant of long kernels"
  awk -v whole="$whole" -v big="$big" -v what="$what" 'BEGIN {
    target = 0.5 / 0.55 - 0.05
    printf "0.5 tenant beside %s: %d kernels = %.1f %% of its rate alone (target >= %.1f %%: %s)\n",
           what, big, 100 * big / whole, 100 * target, (big / whole >= target ? "MET" : "MISSED")
  }'
  exit 0
fi
# The contended tenants start and stop at different moments (each alone on the device meanwhile): count only the
# work each did while all ran, interpolating between their per-batch progress lines.
read -r big small window < <(awk '
  /^busy: at / { t[FILENAME, ++n[FILENAME]] = $3; k[FILENAME, n[FILENAME]] = $4 }
  function at(f, x,   i) {  # kernels done by time x, linear between progress lines
    if (x <= t[f, 1]) return 0
    for (i = 2; i <= n[f]; ++i) if (t[f, i] >= x) return k[f, i-1] + (k[f, i] - k[f, i-1]) * (x - t[f, i-1]) / (t[f, i] - t[f, i-1])
    return k[f, n[f]]
  }
  END {
    # The idle tenant of "burst" starts its clock (its first line) only once it runs.
    lo = 0; hi = -1
    for (i = 1; i < ARGC; ++i) {
      f = ARGV[i]
      if (t[f, 1] > lo) lo = t[f, 1]
      if (hi < 0 || t[f, n[f]] < hi) hi = t[f, n[f]]
    }
    small = 0
    for (i = 2; i < ARGC; ++i) small += at(ARGV[i], hi) - at(ARGV[i], lo)
    printf "%.1f %.1f %.2f\n", at(ARGV[1], hi) - at(ARGV[1], lo), small, (hi - lo) / 1000
  }' "$out/big" "$out"/small.*)
awk -v whole="$whole" -v big="$big" -v small="$small" -v window="$window" -v each="$SECONDS_EACH" \
    -v bs="$big_share" -v ss="$small_share" 'BEGIN {
  total = big + small
  want = bs / (bs + ss)
  printf "contended, while all ran (%.2f s):\n", window
  printf "          %-4s lease:                      %8.1f kernels = %.1f %% of the work (target %.1f..%.1f %%: %s)\n",
         bs, big, 100 * big / total, 100 * want - 5, 100 * want + 5,
         (big / total >= want - 0.05 && big / total <= want + 0.05) ? "MET" : "MISSED"
  printf "          %-4s lease:                      %8.1f kernels = %.1f %% of the work\n", ss, small, 100 * small / total
  printf "contended total: %.1f %% of the baseline rate; ratio %s/%s = %.2f (target %.2f)\n",
         100 * (total / window) / (whole / each), bs, ss, big / small, bs / ss
}'
