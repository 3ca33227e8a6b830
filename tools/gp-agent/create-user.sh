#!/bin/sh
# Creates the system user that gp-agent's session workers run as ([workers] user in agent.toml), when it is absent.
# `cmake --install` runs it when installing as root onto this system (no DESTDIR); scripts/setup.sh runs it too.
#
#   create-user.sh [USER]     (default: gpupool; run as root)
#
# The user has no home and no login shell: it only owns the workers' processes. The workers reach the GPUs
# through the device files' groups, which the agent hands them at start (no group membership needed here).
set -eu
user="${1:-gpupool}"
if getent passwd "$user" >/dev/null 2>&1; then
  echo "gpupool: the workers' user $user exists"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "gpupool: cannot create the workers' user $user: not root (run: sudo $0 $user)" >&2
  exit 1
fi
useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
echo "gpupool: created the system user $user for gp-agent's session workers"
