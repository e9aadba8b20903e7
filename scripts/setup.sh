#!/usr/bin/env bash
# Creates .venv (once) and installs glowpy into it, non-editable, with the test extras when
# asked: `scripts/setup.sh test`. Versions come from constraints/test.txt (every package of the
# test environment, pinned) and constraints/build.txt (the build backend), so a run tomorrow
# installs what a run today did. Prints the venv's bin directory on success.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv >&2
fi
pins=(-c constraints/test.txt)
.venv/bin/python -m pip install -q "${pins[@]}" pip >&2
extra="[images]"  # Pillow, for image-classifier
[ "${1:-}" = "test" ] && extra="[test]"  # (includes Pillow)
.venv/bin/python -m pip install -q "${pins[@]}" --build-constraint constraints/build.txt ".${extra}" >&2
echo "$PWD/.venv/bin"
