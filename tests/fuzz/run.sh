#!/usr/bin/env bash
# Builds the fuzz targets with libFuzzer, ASan and UBSan straight from their sources, seeds a corpus with real nvcc
# output and PTX, and runs each target for a bounded time. Exits non-zero on any crash, sanitizer report, leak,
# timeout or build failure.
#
# A crash leaves its input in BUILD_DIR/artifacts; add it to tests/fuzz/regressions/<target>/, under a name that
# says what the bug was, so every later run replays it first.
#
# Usage: tests/fuzz/run.sh [BUILD_DIR [SEED_DIR]]
#   BUILD_DIR  binaries, corpora (kept between runs, so coverage accumulates) and crash artifacts.
#              Default: build-fuzz at the repository root.
#   SEED_DIR   a folder of *.fatbin, *.cubin and *.ptx files (ctest passes the fatbin tests' nvcc outputs).
#              Without it, seeds are made here with nvcc when it is installed.
# Environment: FUZZ_SECONDS per target (default 30), FUZZ_TARGETS (default "fatbin ptx"; "texture" runs texture and
# surface instructions of the emulated device on random descriptions and handles, building the whole emulator with
# the sanitizers first, which takes minutes; "wire" fuzzes a live
# gp-agent's pool and session services and needs GPUPOOL_FUZZ_AGENT, the gp-agent to run, and GPUPOOL_SCHEMA_DIR,
# the build's generated *.capnp.c++; GPUPOOL_WIRE_FUZZ_MODES, say "57", limits it to those modes of wire_fuzz.cc),
# CXX_FUZZ (clang++). A gp-agent built with -DGPUPOOL_SANITIZE=ON puts the agent and its workers under ASan and
# UBSan too.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build-fuzz}
seed_dir=${2:-}
seconds=${FUZZ_SECONDS:-30}
targets=${FUZZ_TARGETS:-fatbin ptx}
cxx=${CXX_FUZZ:-clang++}
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
       -I"$root/lib")
mkdir -p "$build/artifacts" "$build/seeds"

# build NAME SOURCES... [-- LIBS...]: rebuilds $build/NAME_fuzz when a source or an emu header is newer.
build() {
  local name=$1 bin=$build/$1_fuzz
  shift
  local srcs=() libs=()
  while (($#)) && [[ $1 != -- ]]; do [[ $1 == /* ]] && srcs+=("$1") || srcs+=("$root/$1"); shift; done
  (($#)) && shift && libs=("$@")
  if [[ -x $bin && -z $(find "${srcs[@]}" "$root"/lib/emu/*.h "$root"/lib/emu/*.inc -newer "$bin" 2>/dev/null) ]]; then return 0; fi
  echo "== building $name fuzzer"
  "$cxx" "${flags[@]}" "${srcs[@]}" "${libs[@]}" -o "$bin.tmp"
  mv "$bin.tmp" "$bin"
}

# Seeds: real nvcc output, the same containers behind a fatbin wrapper header, and PTX text.
seeds=$build/seeds
if [[ -n $seed_dir ]]; then
  cp -f "$seed_dir"/*.fatbin "$seed_dir"/*.cubin "$seed_dir"/*.ptx "$seeds"/ 2>/dev/null || true
elif [[ -x $nvcc ]]; then
  kernels=$root/tests/emu/data/kernels.cu
  for mode in default speed none; do
    [[ -s $seeds/$mode.fatbin ]] || "$nvcc" -fatbin --compress-mode=$mode "$kernels" -o "$seeds/$mode.fatbin"
  done
  [[ -s $seeds/debug.fatbin ]] || "$nvcc" -fatbin -G "$kernels" -o "$seeds/debug.fatbin"
  [[ -s $seeds/multi.fatbin ]] || "$nvcc" -fatbin -gencode arch=compute_75,code=compute_75 \
    -gencode arch=compute_90a,code=compute_90a "$kernels" -o "$seeds/multi.fatbin"
  [[ -s $seeds/kernels.ptx ]] || "$nvcc" -ptx "$kernels" -o "$seeds/kernels.ptx"
else
  echo "note: no seed folder and no nvcc; fuzzing from PTX files only" >&2
fi
if [[ -x $nvcc ]]; then  # PTX from the emulator's kernel sources, plain and -G (debug directives).
  for cu in "$root"/tests/emu/ptx/*.cu; do
    [[ -e $cu ]] || continue
    base=$(basename "$cu" .cu)
    [[ -s $seeds/$base.ptx ]] || "$nvcc" -ptx "$cu" -o "$seeds/$base.ptx" || true
    [[ -s $seeds/$base.G.ptx ]] || "$nvcc" -ptx -G "$cu" -o "$seeds/$base.G.ptx" || true
  done
fi

fatbin_corpus=$build/corpus/fatbin
ptx_corpus=$build/corpus/ptx
mkdir -p "$fatbin_corpus" "$ptx_corpus" "$build/corpus/texture" "$build/corpus/wire"
# Texture inputs (layout in texture_fuzz.cc): a real object fetched, forged records, random and stale handles.
# Wire inputs (modes in wire_fuzz.cc): batches, texture object descriptions, typed frames at a worker's door.
for target in texture wire; do
  for f in "$root/tests/fuzz/seeds/$target"/*; do
    [[ -e $f ]] && cp -f "$f" "$build/corpus/$target/seed-$(basename "$f")"
  done
done
for f in "$seeds"/*.fatbin "$seeds"/*.cubin; do
  [[ -e $f ]] || continue
  cp -f "$f" "$fatbin_corpus/seed-$(basename "$f")"
  # Wrapper header (magic, version 1, pointer) in front: the target points the wrapper at what follows.
  { printf '\xb1\x43\x62\x46\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00'; cat "$f"; } \
    >"$fatbin_corpus/seed-wrapped-$(basename "$f")"
done
while IFS= read -r -d '' f; do
  cp -f "$f" "$ptx_corpus/seed-$(basename "$f")"
done < <(find "$seeds" "$root/tests/emu" -name '*.ptx' -print0)
for f in "$seeds"/*.ptx; do [[ -e $f ]] && cp -f "$f" "$fatbin_corpus/seed-$(basename "$f")"; done
# Inputs that once crashed a target, named after the bug: replayed first on every run.
for target in fatbin ptx texture wire; do
  for f in "$root/tests/fuzz/regressions/$target"/*; do
    [[ -e $f ]] && cp -f "$f" "$build/corpus/$target/regression-$(basename "$f")"
  done
done

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for target in $targets; do
  case $target in
    fatbin) build fatbin tests/fuzz/fatbin_fuzz.cc lib/emu/fatbin.cc lib/emu/lz4.cc lib/emu/ptx_text.cc -- -lzstd ;;
    ptx) build ptx tests/fuzz/ptx_fuzz.cc lib/emu/ptx_parser.cc lib/emu/ptx_ast.cc ;;
    texture)
      build texture tests/fuzz/texture_fuzz.cc lib/emu/device.cc lib/emu/exec.cc lib/emu/compile.cc \
        lib/emu/ptx_parser.cc lib/emu/ptx_ast.cc lib/emu/ptx_link.cc lib/emu/ptx_text.cc lib/emu/printf.cc \
        lib/emu/device_properties.cc \
        lib/emu/fatbin.cc lib/emu/lz4.cc -- -lzstd -lpthread -rtlib=compiler-rt
      ;;
    wire)
      schema=${GPUPOOL_SCHEMA_DIR:?set GPUPOOL_SCHEMA_DIR to the folder of the generated schema code}
      : "${GPUPOOL_FUZZ_AGENT:?set GPUPOOL_FUZZ_AGENT to the gp-agent to fuzz}"
      flags+=(-I"$schema" -I"$root/lib")
      build wire tests/fuzz/wire_fuzz.cc "$schema/pool.capnp.c++" "$schema/session.capnp.c++" \
        -- -lcapnp-rpc -lcapnp -lkj-async -lkj -lpthread
      ;;
    *) echo "unknown fuzz target '$target'" >&2; exit 2 ;;
  esac
  corpus=$build/corpus/$target
  log=$build/$target.log
  echo "== fuzzing $target for ${seconds}s ($(ls "$corpus" | wc -l) inputs in $corpus)"
  dict=()
  [[ -e $root/tests/fuzz/$target.dict ]] && dict=(-dict="$root/tests/fuzz/$target.dict")
  if "$build/${target}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      "${dict[@]}" -artifact_prefix="$build/artifacts/$target-" "$corpus" >"$log" 2>&1; then
    grep -E '^(Done|stat::number_of_executed_units|stat::new_units_added|wire_fuzz:)' "$log" || true
  else
    status=1
    echo "!! $target fuzzer failed; last lines of $log (reproduce: $build/${target}_fuzz ARTIFACT):" >&2
    tail -n 60 "$log" >&2
    ls -1 "$build/artifacts" | sed -n "/^$target-/p" >&2
  fi
done
exit $status
