#!/usr/bin/env bash
# The peers of benchmarks/xnnpack.py: onnx2tf (with TensorFlow, the ONNX -> .tflite converter)
# in a virtual environment of its own, build/xnnpack-venv (onnx2tf pins numpy 1.26, TensorFlow
# 2.19 and onnxruntime 1.23 exactly, which cannot share glowpy's venv), and LiteRT, whose
# XNNPACK delegate runs the converted models, in glowpy's .venv (made by scripts/setup.sh).
# About 2.5 GB of downloads the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || scripts/setup.sh test >/dev/null
[ -x build/xnnpack-venv/bin/python ] || "$PY" -m venv build/xnnpack-venv
build/xnnpack-venv/bin/python -m pip install -q onnx2tf==1.29.24
.venv/bin/python -m pip install -q ai-edge-litert==2.3.0
echo "ready: .venv/bin/python benchmarks/xnnpack.py"
