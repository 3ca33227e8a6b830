#!/bin/bash
# Creates (or reuses) the virtual environment of the Python framework tests and installs the pinned packages of
# requirements.txt into it. Reuses it only when it holds exactly those pins.
#
# usage: make_venv.sh VENV_DIR REQUIREMENTS
set -eu
venv=$1 requirements=$2
if [ -f "$venv/requirements.txt" ] && cmp -s "$venv/requirements.txt" "$requirements" && [ -x "$venv/bin/python" ]; then
  echo "make_venv: $venv is up to date"
  exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv" || { echo "make_venv: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
# Twice: a download or an unpacked wheel can fail once on a busy machine (seen: an OSError unpacking triton).
install() { "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$requirements"; }
install || { echo "make_venv: pip failed once; trying again" >&2; install; } ||
  { echo "make_venv: pip could not install $requirements (is PyPI reachable?)" >&2; exit 1; }
cp "$requirements" "$venv/requirements.txt"
"$venv/bin/python" -m pip freeze --disable-pip-version-check
