#!/usr/bin/env bash
# Installation test: installs a build tree into a temporary prefix and uses it the way users do.
#
#   tests/install/install_test.sh BUILD_DIR
#
# Checks that the installed tree has the tools and the public headers, that the public headers include no
# Cap'n Proto, KJ or libuv header, and that examples/consumer builds and runs against the installed library
# both through find_package(gpupool) and through pkg-config. Needs no gp-agent.
set -euo pipefail

if (($# != 1)); then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build="$(cd "$1" && pwd)"
source_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
consumer="$source_dir/examples/consumer"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/gpupool-install-test.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"

fail() {
  echo "install_test: FAIL: $*" >&2
  exit 1
}
step() { echo "install_test: $*"; }

step "installing $build into $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log" >&2; fail "cmake --install failed"; }

step "checking the installed tree"
for f in bin/gp-agent bin/gp-run bin/gp-lease bin/gp-ls bin/gp-top bin/gp-bench; do
  [[ -x "$prefix/$f" ]] || fail "$f is missing or not executable"
done
[[ -e "$prefix/lib/gpupool/cuda/libcuda.so.1" ]] || fail "lib/gpupool/cuda/libcuda.so.1 (the interposer) is missing"
[[ -e "$prefix/lib/gpupool/cuda/libnvidia-ml.so.1" ]] || fail "lib/gpupool/cuda/libnvidia-ml.so.1 (gpupool's NVML) is missing"
for f in include/gpupool/pool.h include/gpupool/lease.h include/gpupool/request.h include/gpupool/status.h; do
  [[ -f "$prefix/$f" ]] || fail "$f is missing"
done
if grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](capnp/|kj/|uv\.h|uv/)' "$prefix/include/gpupool"; then
  fail "the public headers include Cap'n Proto, KJ or libuv headers (above)"
fi
for tool in gp-agent gp-run gp-lease gp-ls gp-top; do
  "$prefix/bin/$tool" --help >/dev/null || fail "$tool --help failed"
done

step "checking the systemd unit, the sample agent.toml and the Slurm plugin"
unit="$prefix/lib/systemd/system/gp-agent.service"
[[ -f "$unit" ]] || fail "lib/systemd/system/gp-agent.service is missing"
grep -qx "ExecStart=$prefix/bin/gp-agent --config $prefix/etc/gpupool/agent.toml" "$unit" ||
  fail "gp-agent.service does not start this installation's gp-agent on its agent.toml: $(grep ExecStart "$unit")"
[[ -f "$prefix/etc/gpupool/agent.toml" && -f "$prefix/share/gpupool/agent.toml.sample" ]] ||
  fail "etc/gpupool/agent.toml or share/gpupool/agent.toml.sample is missing"
if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify "$unit" || fail "systemd-analyze verify $unit"
fi
if [[ -e "$build/lib/gpupool/slurm/spank_gpupool.so" ]]; then
  [[ -e "$prefix/lib/gpupool/slurm/spank_gpupool.so" ]] || fail "lib/gpupool/slurm/spank_gpupool.so is missing"
fi

# Where GNUInstallDirs put the library: lib/ or lib/<multiarch>/, depending on how the build was configured.
pc_file="$(find "$prefix" -name gpupool.pc -path '*/pkgconfig/*' | head -n1)"
[[ -n "$pc_file" ]] || fail "gpupool.pc was not installed"
libdir="$(dirname "$(dirname "$pc_file")")"
[[ -e "$libdir/libgpupool.so" ]] || fail "libgpupool.so is not next to pkgconfig/ in $libdir"
[[ -f "$libdir/cmake/gpupool/gpupoolConfig.cmake" ]] || fail "gpupoolConfig.cmake is not in $libdir/cmake/gpupool"
step "library in ${libdir#"$prefix"/}"

step "building examples/consumer with find_package(gpupool)"
if ! cmake -S "$consumer" -B "$tmp/consumer-cmake" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_BUILD_TYPE=Release >"$tmp/consumer-cmake.log" 2>&1 ||
  ! cmake --build "$tmp/consumer-cmake" >>"$tmp/consumer-cmake.log" 2>&1; then
  cat "$tmp/consumer-cmake.log" >&2
  fail "examples/consumer does not build with find_package(gpupool)"
fi
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/consumer-cmake/consumer" ||
  fail "examples/consumer (CMake build) failed"

step "building examples/consumer with pkg-config"
flags="$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs gpupool)" ||
  fail "pkg-config does not find gpupool in $libdir/pkgconfig"
step "pkg-config --cflags --libs gpupool: $flags"
for flag in $flags; do
  case "$flag" in
    -I* | -L*)
      dir="${flag:2}"
      [[ "$(cd "$dir" 2>/dev/null && pwd -P)" == "$(cd "$prefix" && pwd -P)"/* ]] ||
        fail "gpupool.pc points outside the install prefix ($flag): it must be relocatable (\${pcfiledir})"
      ;;
  esac
done
# shellcheck disable=SC2086  # $flags is a list of flags.
c++ -std=c++17 -o "$tmp/consumer-pc" "$consumer/main.cc" $flags || fail "examples/consumer does not build with pkg-config"
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/consumer-pc" ||
  fail "examples/consumer (pkg-config build) failed"

# The installed gp-run finds the installed interposer and gp-agent on its own: a CUDA program runs on a private
# agent's emulated GPU with nothing configured.
if [[ -x "$build/examples/vector_add" ]]; then
  step "running a CUDA program with the installed gp-run"
  out="$(env -u GPUPOOL_SERVERS -u GPUPOOL_POOL HOME="$tmp" "$prefix/bin/gp-run" -- "$build/examples/vector_add" 4096)" ||
    fail "installed gp-run -- vector_add failed: $out"
  [[ "$out" == *"4096 elements, 0 wrong: PASSED"* ]] || fail "installed gp-run -- vector_add printed: $out"
fi

step "OK"
