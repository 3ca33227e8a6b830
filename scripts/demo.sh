#!/usr/bin/env bash
# The main job, end to end on one machine without GPUs: starts a gp-agent with two emulated GPUs on a Unix
# socket, lists the pool, runs a CUDA program on two half-GPU slices with gp-run, lists the leases, stops the
# agent.
#
#   scripts/demo.sh            (after scripts/setup.sh)
#
# Environment:
#   BUILD_DIR    build directory, relative to the repository root or absolute (default: build)
#   DEMO_SOCKET  the agent's socket (default: /tmp/gpupool-demo.sock)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD_DIR="${BUILD_DIR:-build}"
TOOLS="$BUILD_DIR/tools"
SOCKET="${DEMO_SOCKET:-/tmp/gpupool-demo.sock}"

for tool in gp-agent gp-ls gp-run; do
  if [[ ! -x "$TOOLS/$tool" ]]; then
    echo "demo: $TOOLS/$tool not found: run scripts/setup.sh first" >&2
    exit 1
  fi
done

workdir="$(mktemp -d)"
agent_log="$workdir/agent.log"
agent_pid=""

stop_agent() {
  local status=$?
  if [[ -n "$agent_pid" ]] && kill -0 "$agent_pid" 2>/dev/null; then
    # The first SIGTERM drains (waits for leases to end); a second one makes the agent exit at once.
    kill -TERM "$agent_pid" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$agent_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -TERM "$agent_pid" 2>/dev/null || true
    wait "$agent_pid" 2>/dev/null || true
  fi
  if ((status != 0)) && [[ -s "$agent_log" ]]; then
    echo "demo: failed (status $status); the agent's output:" >&2
    sed 's/^/  | /' "$agent_log" >&2
  fi
  rm -rf "$workdir"
  exit "$status"
}
trap stop_agent EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "==> starting gp-agent with 2 emulated GPUs on unix:$SOCKET"
"$TOOLS/gp-agent" --no-nvml --listen "unix:$SOCKET" --emu 2 --name demo >"$agent_log" 2>&1 &
agent_pid=$!

# Wait for the agent's "listening on" line (stdout), or for it to die.
for _ in $(seq 100); do
  grep -q "^gp-agent .* listening on" "$agent_log" && break
  if ! kill -0 "$agent_pid" 2>/dev/null; then
    wait "$agent_pid" || true
    echo "demo: gp-agent exited before listening" >&2
    exit 1
  fi
  sleep 0.1
done
if ! grep -q "^gp-agent .* listening on" "$agent_log"; then
  echo "demo: gp-agent did not start listening within 10 s" >&2
  exit 1
fi
grep -m1 "^gp-agent .* listening on" "$agent_log"

export GPUPOOL_SERVERS="unix:$SOCKET"

echo
echo "==> gp-ls"
"$TOOLS/gp-ls"

echo
echo "==> gp-run -n 2 -p 0.5 -- two_devices (a CUDA program using both half-GPU slices)"
"$TOOLS/gp-run" -n 2 -p 0.5 -- "$BUILD_DIR/examples/two_devices"

echo
echo "==> gp-ls --leases (gp-run released its lease when the command ended)"
"$TOOLS/gp-ls" --leases

echo
echo "demo: OK"
