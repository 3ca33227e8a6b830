#!/bin/bash
# Runs one CUDA program on remote slices, end to end: starts a private gp-agent (two emulated devices) on a Unix
# socket in a temporary directory, runs the program through gp-run against it, and kills the agent however the
# test ends.
#
# usage: run_remote.sh GP_AGENT GP_RUN EXPECT [GP-RUN OPTIONS...] -- PROGRAM [ARGS...]
#   EXPECT  "pass": the program must exit 0;
#           "fail:REGEX": it must exit with a status in 1..127 (no crash) and REGEX (grep -E) must match its stderr.
set -u
agent=$1 gprun=$2 expect=$3
shift 3

dir=$(mktemp -d "${TMPDIR:-/tmp}/gpupool-interpose-XXXXXX")
agent_pid=
cleanup() {
  if [ -n "$agent_pid" ]; then
    kill "$agent_pid" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$agent_pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$agent_pid" 2>/dev/null
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$agent" --no-nvml --emu 2 --emu-memory 4GiB --listen "unix:$dir/a.sock" >"$dir/agent.out" 2>"$dir/agent.err" &
agent_pid=$!
for _ in $(seq 1 100); do
  grep -q "listening on" "$dir/agent.out" 2>/dev/null && break
  if ! kill -0 "$agent_pid" 2>/dev/null; then
    echo "run_remote: gp-agent exited early:" >&2
    cat "$dir/agent.out" "$dir/agent.err" >&2
    exit 1
  fi
  sleep 0.1
done
grep -q "listening on" "$dir/agent.out" || { echo "run_remote: gp-agent did not start listening" >&2; exit 1; }

"$gprun" --servers "unix:$dir/a.sock" "$@" 2>"$dir/stderr"
status=$?
cat "$dir/stderr" >&2
case $expect in
  pass)
    if [ "$status" -ne 0 ]; then echo "run_remote: FAILED: exit status $status, expected 0" >&2; exit 1; fi
    ;;
  fail:*)
    regex=${expect#fail:}
    if [ "$status" -eq 0 ] || [ "$status" -ge 128 ]; then
      echo "run_remote: FAILED: exit status $status, expected a clean failure (1..127)" >&2
      exit 1
    fi
    if ! grep -Eq "$regex" "$dir/stderr"; then
      echo "run_remote: FAILED: stderr does not match '$regex'" >&2
      exit 1
    fi
    ;;
  *) echo "run_remote: bad EXPECT '$expect'" >&2; exit 2 ;;
esac
echo "run_remote: PASSED"
exit 0
