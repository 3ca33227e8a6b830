#!/usr/bin/env bash
# tls_bench: what TLS costs a copy. Two agents on loopback, one serving plain TCP and one TLS with client
# certificates (a throwaway CA, agent and client certificate made here with openssl); `gp-bench bandwidth` against
# each, in the same run, and the TLS figures as a ratio of the plain ones.
#
#   bench/tls_bench.sh [BUILD_DIR]     (default: build)
# No target: over TLS the session's calls travel through the agent's TLS connection (no direct worker connection),
# so this shows the price of that choice as well as of the encryption.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR="${1:-build}"
AGENT="$BUILD_DIR/tools/gp-agent"
BENCH="$BUILD_DIR/tools/gp-bench"
source bench/lib/private_agent.sh  # require_built
require_built tls_bench "$AGENT" "$BENCH"
command -v openssl >/dev/null || { echo "tls_bench: needs openssl" >&2; exit 1; }

out=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$out"; }
trap cleanup EXIT
(
  cd "$out"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 1 -subj "/CN=tls_bench CA"
  printf "subjectAltName=DNS:localhost\n" >san.ext
  openssl req -newkey rsa:2048 -nodes -keyout agent.key -out agent.csr -subj "/CN=localhost"
  openssl x509 -req -in agent.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out agent.crt -days 1 -extfile san.ext
  openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj "/CN=$(id -un)"
  openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 1
) >/dev/null 2>&1

start_agent() {  # NAME ARGS...: prints the agent's port
  local name=$1
  shift
  "$AGENT" --no-nvml --emu 1 --emu-memory 1GiB --name "$name" --listen 127.0.0.1:0 "$@" >"$out/$name.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    grep -q "listening on" "$out/$name.out" 2>/dev/null && break
    sleep 0.05
  done
  sed -n 's/.* listening on 127.0.0.1:\([0-9]*\) .*/\1/p' "$out/$name.out" | head -n1
}
plain=$(start_agent plain)
tls=$(start_agent tls --tls-cert "$out/agent.crt" --tls-key "$out/agent.key" --tls-ca "$out/ca.crt")

"$BENCH" bandwidth --json --servers "127.0.0.1:$plain" >"$out/plain.json"
GPUPOOL_TLS_CA="$out/ca.crt" GPUPOOL_TLS_CERT="$out/client.crt" GPUPOOL_TLS_KEY="$out/client.key" \
  "$BENCH" bandwidth --json --servers "tls:localhost:$tls" >"$out/tls.json"
python3 - "$out/plain.json" "$out/tls.json" <<'PY'
import json, sys
plain, tls = (json.load(open(p)) for p in sys.argv[1:3])
def figures(doc):
    return {f["name"].rsplit("_", 1)[0]: f["value"] for f in doc["figures"]}
p, t = figures(plain), figures(tls)
print(f"{'copy':<12} {'plain TCP':>10} {'TLS':>10} {'TLS/plain':>10}")
for name in sorted(p):
    if name in t:
        print(f"{name:<12} {p[name]:>8.2f} G {t[name]:>8.2f} G {t[name] / p[name]:>10.3f}")
PY
