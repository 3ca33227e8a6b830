# Sourced by the bench scripts that run a CUDA program on an emulated slice:
#   require_built NAME FILE...
# exits (status 1, saying so) unless every FILE is an executable of the build tree;
#   start_private_agent BUILD_DIR NAME [GP-AGENT OPTIONS...]
# starts gp-agent (one emulated device unless the options say otherwise) on a Unix socket in a fresh temporary
# directory, waits until it listens, and stops it (and removes the directory) when the script exits. Sets
# private_agent_dir and private_agent_socket (a --servers value for gp-run).
require_built() {
  local name=$1 f
  shift
  for f in "$@"; do
    [[ -x "$f" ]] || { echo "$name: $f is missing: build the tree first (scripts/setup.sh)" >&2; exit 1; }
  done
}

start_private_agent() {
  local build_dir=$1 name=$2
  shift 2
  private_agent_dir=$(mktemp -d "${TMPDIR:-/tmp}/gpupool-$name-XXXXXX")
  private_agent_socket="unix:$private_agent_dir/a.sock"
  "$build_dir/tools/gp-agent" --no-nvml "$@" --listen "$private_agent_socket" \
    >"$private_agent_dir/a.out" 2>"$private_agent_dir/a.err" &
  private_agent_pid=$!
  trap 'kill "$private_agent_pid" 2>/dev/null && wait "$private_agent_pid" 2>/dev/null; rm -rf "$private_agent_dir"' EXIT
  for _ in $(seq 1 100); do
    grep -q "listening on" "$private_agent_dir/a.out" 2>/dev/null && return 0
    kill -0 "$private_agent_pid" 2>/dev/null || { echo "$name: gp-agent exited:" >&2; cat "$private_agent_dir/a.err" >&2; exit 1; }
    sleep 0.1
  done
  echo "$name: gp-agent did not start listening" >&2
  exit 1
}
