#!/usr/bin/env bash
# Creates .venv (once) and installs glowpy into it, non-editable, with the test extras when
# asked: `scripts/setup.sh test`. Prints the venv's bin directory on success.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv >&2
fi
.venv/bin/python -m pip install -q --upgrade pip >&2
extra=""
[ "${1:-}" = "test" ] && extra="[test]"
.venv/bin/python -m pip install -q ".${extra}" >&2
echo "$PWD/.venv/bin"
