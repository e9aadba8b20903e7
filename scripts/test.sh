#!/usr/bin/env bash
# One command on a fresh machine: install the cross toolchains and emulators the tests need, and
# Graphviz and Chromium for the HTML report's tests (Debian packages, when missing and we may), install glowpy with its test extras, run the tests.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
for pair in arm-none-eabi-gcc:gcc-arm-none-eabi qemu-system-arm:qemu-system-arm \
            qemu-aarch64:qemu-user aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu \
            valgrind:valgrind cc:gcc make:make dot:graphviz chromium:chromium; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
# newlib has no command of its own: look for its libc
[ -e /usr/lib/arm-none-eabi/newlib/libc.a ] || need+=(libnewlib-arm-none-eabi)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing: ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "warning: missing ${need[*]} (Debian packages); the tests that need them will skip" \
         "(and fail under CI=true)" >&2
  fi
fi
BIN=$(scripts/setup.sh test)
# one worker per core (pytest-xdist): the tests are independent (each its own tmp_path), and the
# suite is compile- and run-bound (2 cores: 37 minutes in one process on a Zen 3)
exec "$BIN/python" -m pytest -n auto "$@"
