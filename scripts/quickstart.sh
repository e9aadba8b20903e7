#!/usr/bin/env bash
# One command on a fresh machine: install glowpy, compile the MNIST model into a bundle, build
# the example C application against it (static API, weights compiled in) and classify the
# three sample digits.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(scripts/setup.sh)
MODEL=${MODEL:-../shared/models/mnist8.onnx}
OUT=${OUT:-build/quickstart}
rm -rf "$OUT/bundle"
"$BIN/model-compiler" -model="$MODEL" -network-name=mnist -emit-bundle="$OUT/bundle" -verbose
for img in examples/bundles/mnist/images/*.pgm; do
  echo "== $img"
  make -s -C examples/bundles/mnist BUNDLE="$PWD/$OUT/bundle" BUILD="$PWD/$OUT/build" IMAGE="$PWD/$img" run
done
