#!/bin/bash
# Slurm jobs on pool slices: a one-node Slurm cluster (munged, slurmctld, slurmd from Debian) in a temporary
# directory, gpupool's SPANK plugin in its plugstack, two gp-agents on loopback (a Unix socket and TCP), and srun,
# sbatch and salloc jobs with --gpupool. Checks what the steps see, that each lease is gone after its step (well
# before the agents' 60 s TTL could free it), also after scancel and after its gp-lease holder was killed, and that
# an unsatisfiable request fails the step with the pool's reason.
#
# usage: slurm_test.sh PLUGIN TOOLS_DIR CUDA_DEVICES_PROGRAM
# Exit status: 0 passed, 1 failed, 77 skipped (the machine will not run the daemons; the reason is printed).
set -u
plugin=$1 tools=$2 cuda_devices=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/slurm_cluster.sh"

work=$(mktemp -d /tmp/gpupool-slurm.XXXXXX)
chmod 0755 "$work"
agent_pids=()
cleanup() {
  slurm_cluster_stop
  # No lease is left, so the agents' drain ends at once.
  stop_processes "${agent_pids[@]}"
  rm -rf "$work"
}
trap cleanup EXIT

failures=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Agents: A on a Unix socket (class blue), B on TCP loopback (class green); two 4 GiB emulated GPUs each.
start_agent() {  # NAME LISTEN CLASS
  "$tools/gp-agent" --no-nvml --emu 2 --emu-memory 4GiB --name "$1" --listen "$2" --class "$3" --lease-ttl 60s \
    >"$work/$1.out" 2>"$work/$1.err" &
  agent_pids+=($!)
}
address_of() {  # NAME: the address its "listening on" line gives
  for _ in $(seq 100); do grep -q "listening on" "$work/$1.out" && break; sleep 0.1; done
  sed -n 's/.* listening on \([^ ]*\) .*/\1/p' "$work/$1.out"
}
start_agent gp-a "unix:$work/a.sock" blue
start_agent gp-b "127.0.0.1:0" green
agent_a=$(address_of gp-a)
agent_b=$(address_of gp-b)
if [[ -z $agent_a || -z $agent_b ]]; then
  echo "FAIL: the gp-agents did not start"; cat "$work"/*.err; exit 1
fi
servers=$agent_a,$agent_b
echo "agents: $servers"

slurm_cluster_start "$work/slurm" "$plugin" "servers=$servers"
rc=$?
((rc == 0)) || exit $rc
# The jobs' environment must not name a pool: the plugin's servers= does.
unset GPUPOOL_SERVERS GPUPOOL_POOL GPUPOOL_LEASE

leases() {  # the number of leases on both agents
  "$tools/gp-ls" --json --leases --servers "$servers" |
    python3 -c 'import json,sys; print(sum(len(s.get("leases") or []) for s in json.load(sys.stdin)["servers"]))'
}
# The step's lease is released by slurmstepd after srun has its exit status: allow a few seconds (not the TTL).
expect_no_lease() {  # WHAT
  local n
  for _ in $(seq 50); do
    n=$(leases)
    [[ $n == 0 ]] && { pass "$1: no lease left"; return; }
    sleep 0.2
  done
  fail "$1: $n lease(s) still held 10 s after the step"
  "$tools/gp-ls" --leases --servers "$servers"
}
wait_for_lease() {
  for _ in $(seq 100); do [[ $(leases) != 0 ]] && return 0; sleep 0.2; done
  return 1
}
run() {  # NAME COMMAND...: runs it with a time limit, output in $work/NAME.out and .err, status in $status
  local name=$1
  shift
  timeout 120 "$@" >"$work/$name.out" 2>"$work/$name.err"
  status=$?
}
show() { echo "--- stdout"; cat "$work/$1.out"; echo "--- stderr"; cat "$work/$1.err"; }

# 1. Two half-GPU slices: the step's CUDA program sees two devices of 2 GiB and allocates on both.
run srun_2x05 srun --gpupool=2x0.5 "$cuda_devices"
if ((status == 0)) && grep -q "cuda_devices: 2 device(s)" "$work/srun_2x05.out" &&
   [[ $(grep -c "2048 MiB, allocated 1 MiB" "$work/srun_2x05.out") == 2 ]]; then
  pass "srun --gpupool=2x0.5: the step sees two 2 GiB slices"
else
  fail "srun --gpupool=2x0.5 (status $status)"; show srun_2x05
fi
expect_no_lease "srun --gpupool=2x0.5"

# 2. Four quarter slices need both agents; the library path starts with gpupool's libcuda directory.
run srun_4x025 srun --gpupool=4x25% sh -c "'$cuda_devices' && printenv LD_LIBRARY_PATH && '$tools/gp-ls' --json --leases --servers '$servers'"
if ((status == 0)) && grep -q "cuda_devices: 4 device(s)" "$work/srun_4x025.out" &&
   [[ $(grep -c "1024 MiB" "$work/srun_4x025.out") == 4 ]] &&
   grep -q "^$(realpath "$(dirname "$plugin")/../cuda")" "$work/srun_4x025.out"; then
  pass "srun --gpupool=4x25%: four 1 GiB slices over two agents, libcuda directory first on LD_LIBRARY_PATH"
else
  fail "srun --gpupool=4x25% (status $status)"; show srun_4x025
fi
expect_no_lease "srun --gpupool=4x25%"

# 3. --gpupool-mem and --gpupool-class: two 1 GiB slices, on agent B (green) only; the lease claims the job's user
# (agent B, on plain TCP without tokens, cannot verify it: the lease is held as "anonymous") and is named after the
# job step.
run srun_class srun --gpupool=2 --gpupool-mem=1GiB --gpupool-class=green \
  sh -c "'$cuda_devices' && '$tools/gp-ls' --json --leases --servers '$servers' > '$work/class.json'"
verdict=$(python3 - "$work/class.json" <<'PY'
import json, sys
servers = json.load(open(sys.argv[1]))["servers"]
held = {s["name"]: s.get("leases") or [] for s in servers}
ok = len(held["gp-a"]) == 0 and len(held["gp-b"]) == 1
lease = held["gp-b"][0] if held["gp-b"] else {}
ok = ok and lease.get("user") == "anonymous" and lease.get("user_claimed") == "root" and not lease.get("user_verified")
ok = ok and lease.get("label", "").startswith("slurm job ") and lease.get("memory_bytes") == 2 << 30
print("ok" if ok else "bad: " + json.dumps(held))
PY
)
if ((status == 0)) && [[ $(grep -c "1024 MiB" "$work/srun_class.out") == 2 && $verdict == ok ]]; then
  pass "srun --gpupool=2 --gpupool-mem=1GiB --gpupool-class=green: two 1 GiB slices on the green agent, lease 'slurm job N step M' claiming root"
else
  fail "srun --gpupool-mem/--gpupool-class (status $status): $verdict"; show srun_class
fi
expect_no_lease "srun --gpupool-class"

# 4. A request the pool can never grant fails the step, saying why, and leaves nothing behind.
run srun_unsatisfiable srun --gpupool=8x1.0 "$cuda_devices"
if ((status != 0)) && ! grep -q "cuda_devices:" "$work/srun_unsatisfiable.out" &&
   grep -q "gpupool: the pool cannot give this step its GPU slices: 8 x GPUs can never be granted: asked for 8 devices; the pool has 4" "$work/srun_unsatisfiable.err"; then
  pass "srun --gpupool=8x1.0 fails the step: $(grep -m1 'gpupool:' "$work/srun_unsatisfiable.err" | sed 's/^.*error: //')"
else
  fail "srun --gpupool=8x1.0 (status $status)"; show srun_unsatisfiable
fi
expect_no_lease "srun --gpupool=8x1.0"

# 5. A malformed option stops srun before it asks Slurm for anything.
run srun_malformed srun --gpupool=2xhalf true
if ((status != 0)) && grep -q "gpupool: --gpupool=2xhalf: 'half' is not a fraction" "$work/srun_malformed.err"; then
  pass "srun --gpupool=2xhalf refused: $(grep -m1 'gpupool:' "$work/srun_malformed.err")"
else
  fail "srun --gpupool=2xhalf (status $status)"; show srun_malformed
fi

# 6. scancel of a running step: the lease goes with it.
timeout 120 srun --gpupool=1x0.5 sh -c 'echo started; exec sleep 300' >"$work/cancel.out" 2>"$work/cancel.err" &
srun_pid=$!
if wait_for_lease; then
  job=$(squeue -h -o %i | head -n1)
  scancel "$job"
  wait "$srun_pid"
  status=$?
  if ((status != 0)); then pass "scancel $job ended the step (srun status $status)"; else fail "scancel: srun exited 0"; fi
  expect_no_lease "scancel of a running step"
else
  fail "srun --gpupool=1x0.5 sleep: no lease appeared"; show cancel
  kill "$srun_pid" 2>/dev/null
fi

# 7. The holder killed mid-step (as a step's end may kill what slurmstepd started): the plugin releases by token.
timeout 120 srun --gpupool=1x0.5 sh -c 'sleep 4; echo done' >"$work/holder.out" 2>"$work/holder.err" &
srun_pid=$!
if wait_for_lease; then
  job=$(squeue -h -o %i | head -n1)
  holder=$(pgrep -f "gp-lease hold --watch-stdin --label slurm job $job " | head -n1)
  [[ -n $holder ]] && kill -KILL "$holder"
  wait "$srun_pid"
  status=$?
  if [[ -n $holder ]] && ((status == 0)); then pass "step $job ran on after its gp-lease holder (pid $holder) was killed"
  else fail "holder killed: holder '$holder', srun status $status"; show holder; fi
  expect_no_lease "a step whose gp-lease holder was killed"
else
  fail "srun --gpupool=1x0.5 sleep 4: no lease appeared"; show holder
  kill "$srun_pid" 2>/dev/null
fi

# 8. sbatch: the batch script holds the lease, and an srun step inside (same options, from the environment) shares
# it rather than asking for a second one.
run sbatch sbatch --wait --gpupool=1x0.25 -o "$work/batch.txt" \
  --wrap "'$cuda_devices' && srun sh -c \"'$cuda_devices' && '$tools/gp-ls' --json --leases --servers '$servers' > '$work/inner.json'\""
inner=$(python3 -c 'import json,sys; print(sum(len(s.get("leases") or []) for s in json.load(open(sys.argv[1]))["servers"]))' \
  "$work/inner.json" 2>/dev/null)
if ((status == 0)) && [[ $(grep -c "cuda_devices: 1 device(s)" "$work/batch.txt") == 2 &&
   $(grep -c "1024 MiB" "$work/batch.txt") == 2 && $inner == 1 ]]; then
  pass "sbatch --gpupool=1x0.25: the batch script and its srun step see the one 1 GiB slice (one lease)"
else
  fail "sbatch --gpupool=1x0.25 (status $status, leases inside the step: '$inner')"; show sbatch; cat "$work/batch.txt"
fi
expect_no_lease "sbatch --gpupool=1x0.25"

# 9. sbatch with a request the pool cannot grant: the job fails and its output says why.
run sbatch_unsatisfiable sbatch --wait --gpupool=3x1.0 --gpupool-class=blue -o "$work/batch_bad.txt" --wrap "'$cuda_devices'"
if ((status != 0)) && grep -q "gpupool: the pool cannot give this step its GPU slices" "$work/batch_bad.txt"; then
  pass "sbatch --gpupool=3x1.0 --gpupool-class=blue fails, its output says: $(grep -m1 'gpupool:' "$work/batch_bad.txt" | sed 's/^.*error: //')"
else
  fail "sbatch --gpupool=3x1.0 --gpupool-class=blue (status $status)"; show sbatch_unsatisfiable; cat "$work/batch_bad.txt"
fi
expect_no_lease "sbatch --gpupool=3x1.0"

# 10. salloc: each srun step of the allocation gets the slices.
run salloc salloc --gpupool=1x0.5 srun "$cuda_devices"
if ((status == 0)) && grep -q "2048 MiB, allocated 1 MiB" "$work/salloc.out"; then
  pass "salloc --gpupool=1x0.5 srun: the step sees a 2 GiB slice"
else
  fail "salloc --gpupool=1x0.5 (status $status)"; show salloc
fi
expect_no_lease "salloc --gpupool=1x0.5"

if ((failures > 0)); then
  echo "$failures check(s) failed; the daemons' logs:"
  slurm_cluster_logs
  exit 1
fi
echo "all Slurm checks passed"
