#!/usr/bin/env bash
# Installs gpupool's build dependencies (Debian/Ubuntu) and builds the tree into build/.
#
#   scripts/setup.sh [EXTRA CMAKE CONFIGURE ARGS...]
#
# Environment:
#   BUILD_DIR   build directory, relative to the repository root or absolute (default: build)
#   BUILD_TYPE  CMAKE_BUILD_TYPE for a fresh configure (default: RelWithDebInfo)
#   JOBS        parallel build jobs (default: the build tool's own default)
#   SKIP_APT=1  do not install packages, only configure and build
#   SKIP_USER=1 do not create the 'gpupool' user session workers run as (tools/gp-agent/create-user.sh)
#   CUDA_FROM_PYPI=1  use NVIDIA's CUDA 13.0 compiler from PyPI even where a toolkit is installed (what happens when
#               none is: see "The CUDA toolkit" below)
# Re-running it is cheap: apt is skipped when every package is already installed, and the build is incremental.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD_DIR="${BUILD_DIR:-build}"
BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}"

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  capnproto libcapnp-dev libuv1-dev libcli11-dev libfmt-dev libtomlplusplus-dev
  googletest libgtest-dev libzstd-dev iproute2
  python3 python3-venv  # the Python framework tests make a venv and pip-install pinned packages into it
  python3-dev pybind11-dev  # the gpupool Python package (python/: gpupool._native over libgpupool)
  clang libclang-rt-14-dev  # libFuzzer for the fatbin and PTX fuzz targets
  libncurses-dev  # gp-top's full-screen view
  tmux curl prometheus  # the operations tests: gp-top in a terminal, /metrics checked by promtool and scraped
  openssl  # the TLS tests make their certificates
  libslurm-dev slurmctld slurmd slurm-client munge  # the Slurm SPANK plugin, and its test's one-node cluster
  systemd  # systemd-analyze verifies the installed gp-agent.service and scores its sandboxing
  etcd-server etcd-client  # the pool's directory: its tests run a 3-member cluster, alloc_bench --directory one
  passwd procps  # useradd: the 'gpupool' user session workers run as; ps, which shows them as that user
)

install_packages() {
  local missing=() pkg
  for pkg in "${PACKAGES[@]}"; do
    if [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)" != ii* ]]; then
      missing+=("$pkg")
    fi
  done
  if ((${#missing[@]} == 0)); then
    echo "setup: all ${#PACKAGES[@]} packages already installed"
    return
  fi
  echo "setup: installing ${missing[*]}"
  local sudo=()
  if ((EUID != 0)); then
    if command -v sudo >/dev/null; then
      sudo=(sudo)
    else
      echo "setup: not root and no sudo: install these packages first: ${missing[*]}" >&2
      exit 1
    fi
  fi
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

if [[ "${SKIP_APT:-0}" != 1 ]]; then
  if ! command -v dpkg-query >/dev/null; then
    echo "setup: dpkg-query not found: this script installs packages on Debian/Ubuntu only (SKIP_APT=1 to skip)" >&2
    exit 1
  fi
  install_packages
fi

# The user gp-agent's session workers run as under a root agent (tests start root agents in CI): created when absent.
if [[ "${SKIP_USER:-0}" != 1 ]]; then
  if ((EUID == 0)); then
    tools/gp-agent/create-user.sh gpupool
  elif command -v sudo >/dev/null && ! getent passwd gpupool >/dev/null; then
    sudo tools/gp-agent/create-user.sh gpupool
  fi
fi

# The CUDA toolkit: the installed one (nvcc on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin), else NVIDIA's CUDA
# 13.0 compiler, runtime and headers from PyPI (pinned, as the headers gpupool builds against), in a venv of the build
# directory. That is enough for gpupool and its CUDA examples (the README's first command, scripts/demo.sh); the test
# suite and benchmarks also link NVIDIA's libraries (cuBLAS, cuFFT...) and the driver stub, which come with the
# toolkit: they are left out of such a build, and setup says so.
cuda_args=()
nvcc=$(command -v nvcc || true)
for candidate in "${CUDA_HOME:-}/bin/nvcc" /usr/local/cuda/bin/nvcc; do
  [[ -z $nvcc && -x $candidate ]] && nvcc=$candidate
done
if [[ -z $nvcc || "${CUDA_FROM_PYPI:-0}" == 1 ]]; then
  cuda_venv="$BUILD_DIR/cuda-toolkit"
  if [[ ! -x "$cuda_venv/bin/pip" ]]; then
    python3 -m venv "$cuda_venv"
  fi
  why="no CUDA toolkit found (nvcc)"
  [[ -n $nvcc ]] && why="CUDA_FROM_PYPI=1"
  echo "setup: $why: installing NVIDIA's CUDA 13.0 compiler and runtime from PyPI into $cuda_venv"
  "$cuda_venv/bin/pip" install -q "nvidia-cuda-nvcc==13.0.88" "nvidia-cuda-crt==13.0.88" "nvidia-nvvm==13.0.88" \
    "nvidia-cuda-runtime==13.0.96" "nvidia-cuda-cccl==13.0.85"
  cuda_home=$("$cuda_venv/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')
  [[ -x "$cuda_home/bin/nvcc" ]] || { echo "setup: nvcc is not in $cuda_home/bin after the install" >&2; exit 1; }
  export CUDA_HOME=$cuda_home PATH="$cuda_home/bin:$PATH"
  cuda_args=(-DGPUPOOL_NVCC="$cuda_home/bin/nvcc" -DGPUPOOL_CUDA_INCLUDE_DIR="$cuda_home/include"
             -DGPUPOOL_BUILD_TESTS=OFF -DGPUPOOL_BUILD_BENCH=OFF)
  echo "setup: building with $cuda_home/bin/nvcc; without the full toolkit the tests and benchmarks are not built" \
       "(install the CUDA toolkit for them)"
elif grep -q "^GPUPOOL_NVCC:FILEPATH=.*/cuda-toolkit/" "$BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
  # An earlier run built with PyPI's compiler; a toolkit is here now: forget those paths, build the tests again.
  cuda_args=(-UGPUPOOL_NVCC -UGPUPOOL_CUDA_INCLUDE_DIR -DGPUPOOL_BUILD_TESTS=ON -DGPUPOOL_BUILD_BENCH=ON)
  echo "setup: a CUDA toolkit is installed now ($nvcc): building with it, tests and benchmarks included"
fi

# Choose the generator only for a fresh build directory: CMake refuses to switch generators later.
generator=()
[[ -f "$BUILD_DIR/CMakeCache.txt" ]] || generator=(-G Ninja)
cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "${cuda_args[@]}" "$@"
cmake --build "$BUILD_DIR" ${JOBS:+-j "$JOBS"}
echo "setup: built into $BUILD_DIR/"
