#!/bin/bash
# Runs one CUDA program on remote slices, end to end: starts a private gp-agent (two emulated devices) on a Unix
# socket in a temporary directory, runs the program through gp-run against it, and kills the agent however the
# test ends.
#
# usage: run_remote.sh [--stacked LIBCUDA | --pool-env] GP_AGENT GP_RUN EXPECT [GP-RUN OPTIONS...] -- PROGRAM [ARGS...]
#   EXPECT  "pass": the program must exit 0;
#           "fail:REGEX": it must exit with a status in 1..127 (no crash) and REGEX (grep -E) must match its stderr.
#   --stacked LIBCUDA  the program's agent runs the cuda backend on LIBCUDA (gpupool's own libcuda.so.1) instead
#           of emulated devices: a second agent with two emulated devices is started first, and the program's
#           agent runs under gp-run holding both of them, so its GPUs are those slices (a test configuration).
#   --pool-env  the program runs without gp-run, with the agent as its pool (GPUPOOL_SERVERS): a program that takes
#           its slices itself (gpupool.attach in Python); the gp-run options are ignored.
set -u
stacked= pool_env=
if [ "${1:-}" = --stacked ]; then stacked=$2; shift 2; fi
if [ "${1:-}" = --pool-env ]; then pool_env=1; shift; fi
agent=$1 gprun=$2 expect=$3
shift 3

dir=$(mktemp -d "${TMPDIR:-/tmp}/gpupool-interpose-XXXXXX")
agent_pid=
cleanup() {
  # The last started first: a stacked agent ends its sessions before the agent below it goes.
  local pid
  for pid in $(echo $agent_pid | tr ' ' '\n' | tac); do
    kill "$pid" 2>/dev/null
    for _ in $(seq 1 25); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null
  done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_agent NAME ARGS...: starts an agent on unix:$dir/NAME.sock and waits until it listens; its pid in $agent_pid.
start_agent() {
  local name=$1
  shift
  "$@" --listen "unix:$dir/$name.sock" >"$dir/$name.out" 2>"$dir/$name.err" &
  agent_pid="$agent_pid $!"
  local pid=$!
  for _ in $(seq 1 100); do
    grep -q "listening on" "$dir/$name.out" 2>/dev/null && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "run_remote: gp-agent ($name) exited early:" >&2
      cat "$dir/$name.out" "$dir/$name.err" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "run_remote: gp-agent ($name) did not start listening" >&2
  cat "$dir/$name.out" "$dir/$name.err" >&2
  exit 1
}

if [ -n "$stacked" ]; then
  # The stacked agent's session workers reach their "GPUs" (the agent below) as the workers' user ([workers] user,
  # gpupool, under a root agent), as they reach /dev/nvidia* on a real server: the directory may be passed through
  # and the socket is open to all (0666, which --require-auth sets), the kernel telling the agent below who calls.
  chmod 711 "$dir"
  start_agent gpus "$agent" --no-nvml --emu 2 --emu-memory 4GiB --name gpus --require-auth
  start_agent a "$gprun" --servers "unix:$dir/gpus.sock" -n 2 -- "$agent" --no-nvml --cuda-driver "$stacked" \
    --name stacked
  grep -q "found 2 GPU" "$dir/a.err" || { echo "run_remote: the stacked agent has no GPUs:" >&2; cat "$dir/a.err" >&2; exit 1; }
else
  start_agent a "$agent" --no-nvml --emu 2 --emu-memory 4GiB
fi

# The program's agent, for programs that test its loss (they may kill it; cleanup then finds it gone).
export RUN_REMOTE_AGENT_PID=${agent_pid##* }

if [ -n "$pool_env" ]; then
  while [ $# -gt 0 ] && [ "$1" != -- ]; do shift; done
  shift
  GPUPOOL_SERVERS="unix:$dir/a.sock" "$@" 2>"$dir/stderr"
else
  "$gprun" --servers "unix:$dir/a.sock" "$@" 2>"$dir/stderr"
fi
status=$?
cat "$dir/stderr" >&2
# failed WHY: the agents' logs, then the verdict.
failed() {
  for log in "$dir"/*.err; do
    echo "--- $(basename "$log"):" >&2
    tail -n 30 "$log" >&2
  done
  echo "run_remote: FAILED: $1" >&2
  exit 1
}
case $expect in
  pass)
    if [ "$status" -ne 0 ]; then failed "exit status $status, expected 0"; fi
    ;;
  fail:*)
    regex=${expect#fail:}
    if [ "$status" -eq 0 ] || [ "$status" -ge 128 ]; then
      failed "exit status $status, expected a clean failure (1..127)"
    fi
    if ! grep -Eq "$regex" "$dir/stderr"; then
      failed "stderr does not match '$regex'"
    fi
    ;;
  *) echo "run_remote: bad EXPECT '$expect'" >&2; exit 2 ;;
esac
echo "run_remote: PASSED"
exit 0
