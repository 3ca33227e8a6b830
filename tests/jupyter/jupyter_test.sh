#!/bin/bash
# A Jupyter kernel that takes a gpupool slice on demand: the kernel spec of examples/jupyter/gpupool (GPUPOOL_REQUEST
# and gpupool's libcuda directory in its env), installed in a temporary JUPYTER_PATH, runs
# examples/jupyter/gpupool_slice.ipynb under `jupyter nbconvert --execute` against a gp-agent on a Unix socket. The
# executed notebook must show the slice (one device, half of 4 GiB) and a correct round trip through its memory,
# and the kernel's lease must be gone at once after it shut down: the lease a program allocates from GPUPOOL_REQUEST
# is released as it exits (the agent's TTL, 20 s here, would come far later). The same notebook on the kernel spec
# that starts the kernel under gp-run (examples/jupyter/gpupool-held): its lease must be gone at once too.
#
# usage: jupyter_test.sh VENV REQUIREMENTS TOOLS_DIR LIBCUDA_DIR SOURCE_DIR
set -u
venv=$1 requirements=$2 tools=$3 libcuda_dir=$4 source_dir=$5

"$source_dir/tests/python/make_venv.sh" "$venv" "$requirements" >/dev/null || exit 1

work=$(mktemp -d /tmp/gpupool-jupyter.XXXXXX)
agent_pid=
cleanup() {
  if [[ -n $agent_pid ]]; then
    kill -TERM "$agent_pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$agent_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$agent_pid" 2>/dev/null
    wait "$agent_pid" 2>/dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT
failures=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$tools/gp-agent" --no-nvml --emu 1 --emu-memory 4GiB --name nb --listen "unix:$work/agent.sock" --lease-ttl 20s \
  >"$work/agent.out" 2>"$work/agent.err" &
agent_pid=$!
for _ in $(seq 100); do grep -q "listening on" "$work/agent.out" && break; sleep 0.1; done
grep -q "listening on" "$work/agent.out" || { echo "FAIL: gp-agent did not start"; cat "$work/agent.err"; exit 1; }
export GPUPOOL_SERVERS="unix:$work/agent.sock"
leases() {
  "$tools/gp-ls" --json --leases |
    python3 -c 'import json,sys; print(sum(len(s.get("leases") or []) for s in json.load(sys.stdin)["servers"]))'
}

# Jupyter's directories in the temporary directory; the example's spec with this build's libcuda directory.
export HOME=$work/home JUPYTER_PATH=$work/jupyter JUPYTER_CONFIG_DIR=$work/config JUPYTER_DATA_DIR=$work/data \
  JUPYTER_RUNTIME_DIR=$work/runtime IPYTHONDIR=$work/ipython
mkdir -p "$HOME" "$JUPYTER_PATH/kernels/gpupool"
mkdir -p "$JUPYTER_PATH/kernels/gpupool-held"
python3 - "$source_dir/examples/jupyter" "$JUPYTER_PATH/kernels" "$libcuda_dir" "$tools/gp-run" <<'PY'
import json, sys
examples, kernels, libcuda_dir, gp_run = sys.argv[1:5]
spec = json.load(open(examples + "/gpupool/kernel.json"))
spec["env"]["LD_LIBRARY_PATH"] = libcuda_dir
json.dump(spec, open(kernels + "/gpupool/kernel.json", "w"), indent=1)
spec = json.load(open(examples + "/gpupool-held/kernel.json"))
spec["argv"][0] = gp_run
json.dump(spec, open(kernels + "/gpupool-held/kernel.json", "w"), indent=1)
PY
"$venv/bin/jupyter" kernelspec list >"$work/kernelspecs.txt"
grep -q "gpupool *$JUPYTER_PATH/kernels/gpupool\$" "$work/kernelspecs.txt" &&
  grep -q "gpupool-held *$JUPYTER_PATH/kernels/gpupool-held\$" "$work/kernelspecs.txt" &&
  pass "jupyter kernelspec list shows the gpupool and gpupool-held kernels" ||
  { fail "the kernel specs are not found"; cat "$work/kernelspecs.txt"; }
# gp-run finds gpupool's libcuda directory beside itself; the kernel's python is the venv's.
export PATH=$venv/bin:$PATH

run_notebook() {  # KERNEL WHAT SECONDS: runs the example notebook on KERNEL; the lease must go within SECONDS
  local kernel=$1 what=$2 seconds=$3 status outputs n
  [[ $(leases) == 0 ]] || fail "$kernel: a lease is held before the notebook runs"
  timeout 300 "$venv/bin/jupyter" nbconvert --to notebook --execute --ExecutePreprocessor.timeout=240 \
    --ExecutePreprocessor.kernel_name="$kernel" --output-dir "$work" --output "$kernel.ipynb" \
    "$source_dir/examples/jupyter/gpupool_slice.ipynb" >"$work/$kernel.out" 2>"$work/$kernel.err"
  status=$?
  outputs=$(python3 -c '
import json, sys
for cell in json.load(open(sys.argv[1]))["cells"]:
    for output in cell.get("outputs", []):
        print("".join(output.get("text", "")) or json.dumps(output))' "$work/$kernel.ipynb" 2>/dev/null)
  echo "--- the notebook's outputs on $kernel"
  echo "$outputs"
  if ((status == 0)) && grep -q "^1 device(s)" <<<"$outputs" &&
     grep -q "device 0: gpupool emulated GPU, 2048 MiB" <<<"$outputs" && grep -q "round trip: ok" <<<"$outputs" &&
     grep -q "slice memory: 2048 MiB" <<<"$outputs"; then
    pass "nbconvert --execute on $kernel ($what): one 2 GiB slice, a 64 MiB round trip ok"
  else
    fail "nbconvert --execute on $kernel (status $status)"; cat "$work/$kernel.err"
  fi
  for _ in $(seq $((seconds * 5))); do n=$(leases); [[ $n == 0 ]] && break; sleep 0.2; done
  [[ $n == 0 ]] && pass "$kernel: the kernel's lease is gone within $seconds s of its shutdown" ||
    { fail "$kernel: $n lease(s) still held $seconds s after the kernel shut down"; "$tools/gp-ls" --leases; }
}
run_notebook gpupool "GPUPOOL_REQUEST, allocated at cuInit" 2
run_notebook gpupool-held "under gp-run" 2

((failures == 0)) || { echo "$failures check(s) failed"; cat "$work/agent.err" | tail -20; exit 1; }
echo "all Jupyter checks passed"
