#!/usr/bin/env bash
# share_bench: does `-p` buy compute? Two tenants on one emulated GPU, each running back-to-back kernels of fixed
# work for the same wall time (tests/remote/programs/busy.cu), with shares 0.75 and 0.25; prints the share of the
# work each got, beside a baseline measured in the same run: the same program alone on the whole device and alone
# on a 0.25 slice (work-conserving: a tenant alone should get the whole device).
#
#   bench/share_bench.sh [BUILD_DIR] [SECONDS] [kernel|submission]     (default: build, 6, kernel)
# kernel: the emulated device takes turns per kernel, pausing running kernels at its checkpoints (how emulated
# devices are shared). submission: the session server takes turns per submitted kernel or copy, as it does for a
# physical GPU without MPS (GPUPOOL_EMU_SUBMISSION_TURNS=1 in the agent's environment).
# Targets (issue "Sessions, rebuilt"): contended shares within 5 points of 0.75/0.25; alone on 0.25 >= 90 % of
# alone on the whole device.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR="${1:-build}"
SECONDS_EACH="${2:-6}"
TURNS="${3:-kernel}"
case "$TURNS" in
  kernel) ;;
  submission) export GPUPOOL_EMU_SUBMISSION_TURNS=1 ;;
  *) echo "share_bench: turns must be 'kernel' or 'submission', not '$TURNS'" >&2; exit 2 ;;
esac
AGENT="$BUILD_DIR/tools/gp-agent"
RUN="$BUILD_DIR/tools/gp-run"
BUSY="$BUILD_DIR/tests/remote/programs/busy"
for f in "$AGENT" "$RUN" "$BUSY"; do
  [[ -x "$f" ]] || { echo "share_bench: $f is missing: build the tree first (scripts/setup.sh)" >&2; exit 1; }
done

out=$(mktemp -d)
trap 'kill $agent_pid 2>/dev/null; wait $agent_pid 2>/dev/null; rm -rf "$out"' EXIT
"$AGENT" --no-nvml --emu 1 --emu-memory 4GiB --listen 127.0.0.1:0 --name share-bench >"$out/agent.out" 2>"$out/agent.err" &
agent_pid=$!
for _ in $(seq 100); do grep -q listening "$out/agent.out" 2>/dev/null && break; sleep 0.1; done
server=$(sed -nE 's/.* listening on ([^ ]+) .*/\1/p' "$out/agent.out")
[[ -n "$server" ]] || { echo "share_bench: gp-agent did not start:" >&2; cat "$out/agent.err" >&2; exit 1; }

kernels() { sed -nE 's/^busy: ([0-9]+) kernels.*/\1/p' "$1"; }
run_busy() { "$RUN" --servers "$server" -p "$1" -- "$BUSY" "$SECONDS_EACH" trace >"$2"; }

echo "share_bench: $(nproc) CPU(s), ${SECONDS_EACH} s per run, one emulated GPU, turns per $TURNS"
run_busy 1 "$out/whole"
run_busy 0.25 "$out/alone"
run_busy 0.75 "$out/big" &
big_pid=$!
run_busy 0.25 "$out/small"
wait $big_pid
whole=$(kernels "$out/whole") alone=$(kernels "$out/alone")
# The contended tenants start and stop at different moments (each alone on the device meanwhile): count only the
# work each did while both ran, interpolating between their per-batch progress lines.
read -r big small window < <(awk '
  /^busy: at / { t[FILENAME, ++n[FILENAME]] = $3; k[FILENAME, n[FILENAME]] = $4 }
  function at(f, x,   i) {  # kernels done by time x, linear between progress lines
    if (x <= t[f, 1]) return 0
    for (i = 2; i <= n[f]; ++i) if (t[f, i] >= x) return k[f, i-1] + (k[f, i] - k[f, i-1]) * (x - t[f, i-1]) / (t[f, i] - t[f, i-1])
    return k[f, n[f]]
  }
  END {
    a = ARGV[1]; b = ARGV[2]
    lo = t[a, 1] > t[b, 1] ? t[a, 1] : t[b, 1]
    hi = t[a, n[a]] < t[b, n[b]] ? t[a, n[a]] : t[b, n[b]]
    printf "%.1f %.1f %.2f\n", at(a, hi) - at(a, lo), at(b, hi) - at(b, lo), (hi - lo) / 1000
  }' "$out/big" "$out/small")
awk -v whole="$whole" -v alone="$alone" -v big="$big" -v small="$small" -v window="$window" -v each="$SECONDS_EACH" 'BEGIN {
  printf "baseline  alone on the whole GPU (-p 1):   %6d kernels\n", whole
  printf "alone     on a 0.25 slice:                 %6d kernels = %.1f %% of the baseline (target >= 90 %%: %s)\n",
         alone, 100 * alone / whole, (alone >= 0.9 * whole ? "MET" : "MISSED")
  total = big + small
  printf "contended, while both ran (%.2f s):\n", window
  printf "          0.75 slice:                      %8.1f kernels = %.1f %% of the work (target 70..80 %%: %s)\n",
         big, 100 * big / total, (big / total >= 0.70 && big / total <= 0.80) ? "MET" : "MISSED"
  printf "          0.25 slice:                      %8.1f kernels = %.1f %% of the work\n", small, 100 * small / total
  printf "contended total: %.1f %% of the baseline rate; ratio 0.75/0.25 = %.2f (target 3)\n",
         100 * (total / window) / (whole / each), big / small
}'
