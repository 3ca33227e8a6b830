#!/usr/bin/env bash
# Prepares, on a Debian machine with apt, the build dependencies that scripts/gpu-acceptance.sh needs on a GPU
# machine that has no package registry: the .deb files of gpupool's Debian dependencies, downloaded (not
# installed) into .gpu-deps/ (git-ignored), which travels with the tree.
#
#   scripts/gpu-deps.sh        # then carry .gpu-deps to the GPU machine and run scripts/gpu-acceptance.sh there
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PACKAGES=(
  capnproto libcapnp-dev libcapnp-0.9.2 libuv1-dev libuv1 libcli11-dev libfmt-dev libfmt9
  libtomlplusplus-dev libtomlplusplus3 googletest libgtest-dev libzstd-dev libzstd1 libssl-dev libssl3
  pkgconf pkgconf-bin libpkgconf3
)
mkdir -p .gpu-deps
cd .gpu-deps
rm -f ./*.deb
# apt-get download writes into the current directory; as root it warns that _apt cannot write here: harmless.
apt-get download "${PACKAGES[@]}" 2>&1 | grep -v "couldn't be accessed by user '_apt'" || true
count=$(ls ./*.deb | wc -l)
if ((count != ${#PACKAGES[@]})); then
  echo "gpu-deps: expected ${#PACKAGES[@]} packages, got $count" >&2
  exit 1
fi
echo "gpu-deps: $count packages in .gpu-deps/ ($(du -sh . | cut -f1))"
