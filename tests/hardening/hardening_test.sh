#!/usr/bin/env bash
# The hardening of cmake/Hardening.cmake, read back from what the build made:
#
#   tests/hardening/hardening_test.sh FILE...
#
# Each ELF file named must be position independent (an executable: type DYN, a PIE), have full RELRO (a
# GNU_RELRO segment and BIND_NOW), and call the stack protector's failure handler (__stack_chk_fail) and at
# least one of glibc's checked functions (__*_chk, from _FORTIFY_SOURCE), which every gpupool binary has reason to.
set -euo pipefail

if (($# == 0)); then
  echo "usage: $0 FILE..." >&2
  exit 2
fi
failures=0
fail() {
  echo "hardening_test: FAIL: $1: $2" >&2
  failures=$((failures + 1))
}
for file in "$@"; do
  before=$failures
  [[ -f "$file" ]] || { fail "$file" "missing"; continue; }
  header="$(readelf -h "$file")"
  grep -Eq 'Type:[[:space:]]+DYN' <<<"$header" || fail "$file" "not position independent ($(grep Type: <<<"$header"))"
  readelf -lW "$file" | grep -q GNU_RELRO || fail "$file" "no GNU_RELRO segment (-z relro)"
  dynamic="$(readelf -dW "$file")"
  grep -Eq '\(BIND_NOW\)|\(FLAGS\).*BIND_NOW|\(FLAGS_1\).*NOW' <<<"$dynamic" || fail "$file" "not bound at load (-z now)"
  symbols="$(readelf --dyn-syms -W "$file")"
  grep -q '__stack_chk_fail' <<<"$symbols" || fail "$file" "no stack protector (__stack_chk_fail)"
  grep -Eq ' __[a-z0-9_]+_chk(@|$)' <<<"$symbols" || fail "$file" "no checked glibc function (_FORTIFY_SOURCE)"
  ((failures > before)) || echo "hardening_test: $file: PIE, full RELRO, stack protector, fortified"
done
((failures == 0)) || exit 1
