#!/usr/bin/env bash
# Issue 43's goal between agents: the pause a program sees when its lease moves to another agent and back, across a
# veth pair (a network namespace holds the second agent), against pause <= bytes / (0.9 x the link's bandwidth) +
# 50 ms, the link measured in the same run through a raw sink in that namespace. Needs root.
#   bench/migrate_veth.sh [gp-bench options, e.g. --json]     (BUILD=build by default)
set -euo pipefail
BUILD=${BUILD:-build}
[ "$(id -u)" = 0 ] || { echo "migrate_veth.sh: needs root (network namespaces): skipped" >&2; exit 77; }
suffix=$$
ns=gpmig$suffix here_if=gpmh$suffix there_if=gpmn$suffix
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  ip link del "$here_if" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$ns"
ip link add "$here_if" type veth peer name "$there_if"
ip link set "$there_if" netns "$ns"
ip addr add 10.232.0.1/24 dev "$here_if"
ip link set "$here_if" up
ip netns exec "$ns" ip addr add 10.232.0.2/24 dev "$there_if"
ip netns exec "$ns" ip link set "$there_if" up
ip netns exec "$ns" ip link set lo up

# Over TCP an administrator proves who it is with a token: the agents move leases to each other as root, and
# gp-bench asks for the moves as root.
token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '[tokens]\nroot = "%s"\n' "$token" > "$work/tokens.toml"
chmod 600 "$work/tokens.toml"
export GPUPOOL_TOKEN=$token
here=10.232.0.1:7461 there=10.232.0.2:7461 sink=10.232.0.2:7462
"$BUILD/tools/gp-agent" --no-nvml --emu 1 --emu-memory 2GiB --name here --listen "$here" \
  --tokens "$work/tokens.toml" > "$work/here.log" 2>&1 &
pids+=($!)
ip netns exec "$ns" "$BUILD/tools/gp-agent" --no-nvml --emu 1 --emu-memory 2GiB --name there --listen "$there" \
  --tokens "$work/tokens.toml" > "$work/there.log" 2>&1 &
pids+=($!)
# The raw sink (gp-bench's RawLink protocol): a 16-byte header {kind, bytes}, the bytes, an 8-byte answer. It reads
# into one buffer with recv_into, so that Python is not what limits the link it measures.
ip netns exec "$ns" python3 -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.232.0.2", 7462))
s.listen(1)
c, _ = s.accept()
buf = memoryview(bytearray(4 << 20))
def exact(n):
    b = b""
    while len(b) < n:
        got = c.recv(n - len(b))
        if not got:
            sys.exit(0)
        b += got
    return b
while True:
    header = exact(16)
    left = int.from_bytes(header[8:], "little") if int.from_bytes(header[:8], "little") == 1 else 0
    while left > 0:
        got = c.recv_into(buf[:min(left, len(buf))])
        if not got:
            sys.exit(0)
        left -= got
    c.sendall(header[:8])
' &
pids+=($!)
for log in here there; do
  for _ in $(seq 100); do grep -q "listening on" "$work/$log.log" && break; sleep 0.1; done
  grep -q "listening on" "$work/$log.log" || { echo "migrate_veth.sh: agent $log did not start:" >&2; cat "$work/$log.log" >&2; exit 1; }
done
for _ in $(seq 50); do ip netns exec "$ns" ss -ltn | grep -q 7462 && break; sleep 0.1; done
"$BUILD/tools/gp-bench" migrate --servers "$here" --to "$there" --link-sink "$sink" "$@"
