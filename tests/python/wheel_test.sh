#!/usr/bin/env bash
# The gpupool wheel (pyproject.toml, issue 46), as a user gets it: `pip wheel` from the source tree (scikit-build-core
# builds the CMake project), installed into a fresh venv, then, with no pool configured and no gp-run,
# gpupool.attach(n=2) gives the process two emulated slices from the gp-agent inside the wheel, and the wheel's
# gp-run runs a command on its private agent.
#   wheel_test.sh SOURCE_DIR
set -euo pipefail
source_dir=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/gpupool-wheel-XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --upgrade pip
"$work/venv/bin/pip" wheel -q "$source_dir" -w "$work/wheel"
"$work/venv/bin/pip" install -q "$work"/wheel/gpupool-*.whl
mkdir "$work/home"
cd "$work"  # Not the source tree: the installed package, not python/gpupool, must be imported.
env -u GPUPOOL_SERVERS -u GPUPOOL_POOL -u GPUPOOL_LEASE -u GPUPOOL_REQUEST HOME="$work/home" \
  "$work/venv/bin/python" - <<'PY'
import os
import gpupool
assert "site-packages" in gpupool.__file__, gpupool.__file__
attached = gpupool.attach(n=2, fraction=0.5)
assert attached.devices == 2, attached
bin_dir = os.path.join(os.path.dirname(gpupool.__file__), "bin")
assert os.access(os.path.join(bin_dir, "gp-agent"), os.X_OK), "gp-agent in the wheel"
print("wheel: attach gave", attached.devices, "devices")
PY
site=$("$work/venv/bin/python" -c 'import gpupool, os; print(os.path.dirname(gpupool.__file__))')
out=$(env -u GPUPOOL_SERVERS -u GPUPOOL_POOL HOME="$work/home" "$site/bin/gp-run" -q -- /bin/echo ran)
[[ $out == ran ]] || { echo "wheel_test: the wheel's gp-run printed '$out'" >&2; exit 1; }
echo "wheel_test: PASSED"
