"""Compile time against model size: is it linear?

Builds models of growing size in memory (random weights) and compiles each for the host,
printing CPU seconds and CPU milliseconds per node:
  chain N      N small elementwise nodes in a chain (Add/Mul/Relu/Sigmoid on 1x16)
  outputs N    N parallel outputs, each Relu(x + c_i)
  blocks N     residual blocks (Conv-BN-Relu-Conv-BN-Add-Relu, 8x8x8) up to N nodes
  densenet121  DenseNet-121 at 224x224 (ONNX graph as torchvision exports it)
A compiler whose per-node time is flat from 500 to 10,000 nodes is linear.

    python benchmarks/compile_time.py                 # the whole table
    python benchmarks/compile_time.py --only chain --sizes 500,2000
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import glowpy  # noqa: E402

RNG = np.random.default_rng(0)


def _model(nodes, inits, inputs, outputs, name):
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def chain(n):
    """n elementwise nodes in one chain on a 1x16 tensor."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])
    nodes, inits, prev = [], [], "x"
    kinds = ("Add", "Mul", "Relu", "Sigmoid")
    for i in range(n):
        op = kinds[i % 4]
        out = "y" if i == n - 1 else f"t{i}"
        if op in ("Add", "Mul"):
            c = f"c{i}"
            inits.append(numpy_helper.from_array(
                RNG.uniform(0.5, 1.0, (16,)).astype(np.float32), c))
            nodes.append(helper.make_node(op, [prev, c], [out], name=f"n{i}"))
        else:
            nodes.append(helper.make_node(op, [prev], [out], name=f"n{i}"))
        prev = out
    return _model(nodes, inits, [x], [y], "chain")


def outputs(n):
    """n parallel outputs, each Relu(x + c_i): 2n nodes."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])
    nodes, inits, outs = [], [], []
    for i in range(n):
        c = f"c{i}"
        inits.append(numpy_helper.from_array(RNG.standard_normal(16).astype(np.float32), c))
        nodes.append(helper.make_node("Add", ["x", c], [f"a{i}"], name=f"add{i}"))
        nodes.append(helper.make_node("Relu", [f"a{i}"], [f"y{i}"], name=f"relu{i}"))
        outs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, 16]))
    return _model(nodes, inits, [x], outs, "outputs")


def blocks(n):
    """Residual blocks of 7 nodes (Conv-BN-Relu-Conv-BN-Add-Relu on 8x8x8) up to n nodes: a
    deep ResNet's structure, with every pass and the planner's in-place choices at work."""
    b = _Builder()
    x = "x"
    for _ in range(max(1, n // 7)):
        h = b.bn_relu(b.conv(x, 8, 8, 3, 1, 1), 8)
        h = b.conv(h, 8, 8, 3, 1, 1)
        s, bb, m, v = (b.const(RNG.uniform(0.5, 1.5, 8)), b.const(RNG.uniform(-.1, .1, 8)),
                       b.const(RNG.uniform(-.1, .1, 8)), b.const(RNG.uniform(0.5, 1.5, 8)))
        h = b.node("BatchNormalization", [h, s, bb, m, v])
        x = b.node("Relu", [b.node("Add", [h, x])])
    b.nodes[-1].output[0] = "y"
    io = [helper.make_tensor_value_info(k, TensorProto.FLOAT, [1, 8, 8, 8]) for k in "xy"]
    return _model(b.nodes, b.inits, io[:1], io[1:], "blocks")


class _Builder:
    def __init__(self):
        self.nodes, self.inits, self.k = [], [], 0

    def name(self, p):
        self.k += 1
        return f"{p}{self.k}"

    def const(self, arr):
        n = self.name("w")
        self.inits.append(numpy_helper.from_array(arr.astype(np.float32), n))
        return n

    def node(self, op, ins, **attrs):
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def conv(self, x, cin, cout, k, stride=1, pad=0):
        w = self.const(RNG.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k)))
        return self.node("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride],
                         pads=[pad] * 4)

    def bn_relu(self, x, c):
        s = self.const(RNG.uniform(0.5, 1.5, c))
        b = self.const(RNG.uniform(-0.1, 0.1, c))
        m = self.const(RNG.uniform(-0.1, 0.1, c))
        v = self.const(RNG.uniform(0.5, 1.5, c))
        return self.node("Relu", [self.node("BatchNormalization", [x, s, b, m, v])])


def densenet121(size=224):
    """DenseNet-121 (growth 32, blocks 6/12/24/16, bn_size 4) as torchvision's export."""
    b = _Builder()
    x = b.conv("input", 3, 64, 7, 2, 3)
    x = b.bn_relu(x, 64)
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c = 64
    for bi, layers in enumerate((6, 12, 24, 16)):
        feats = [x]
        for _ in range(layers):
            cat = feats[0] if len(feats) == 1 else b.node("Concat", feats, axis=1)
            h = b.conv(b.bn_relu(cat, c), c, 128, 1)
            h = b.conv(b.bn_relu(h, 128), 128, 32, 3, 1, 1)
            feats.append(h)
            c += 32
        x = b.node("Concat", feats, axis=1)
        if bi < 3:
            x = b.conv(b.bn_relu(x, c), c, c // 2, 1)
            c //= 2
            x = b.node("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.bn_relu(x, c)
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x])
    w = b.const(RNG.standard_normal((1000, c)) * 0.01)
    bias = b.const(np.zeros(1000))
    b.node("Gemm", [x, w, bias], transB=1)
    b.nodes[-1].output[0] = "output"
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])
    out = helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1000])
    return _model(b.nodes, b.inits, [inp], [out], "densenet121")


def compile_cpu_seconds(model, **options):
    """CPU seconds (this process, user + system) to compile model into a fresh directory."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        onnx.save(model, path)
        t0 = time.process_time()
        glowpy.compile(path, os.path.join(d, "out"), **options)
        return time.process_time() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("chain", "outputs", "blocks", "densenet121"))
    ap.add_argument("--sizes", default="500,1000,2000,5000,10000")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",")]
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    print(f"{'model':<14}{'nodes':>8}{'CPU s':>10}{'ms/node':>10}")
    rows = []
    if a.only in (None, "chain"):
        rows += [(f"chain", n, chain(n)) for n in sizes]
    if a.only in (None, "outputs"):
        rows += [(f"outputs", 2 * n, outputs(n)) for n in sizes if n <= 5000]
    if a.only in (None, "blocks"):
        rows += [("blocks", 7 * (n // 7), blocks(n)) for n in sizes]
    if a.only in (None, "densenet121"):
        m = densenet121()
        rows.append(("densenet121", len(m.graph.node), m))
    for label, n, m in rows:
        s = compile_cpu_seconds(m)
        print(f"{label:<14}{n:>8}{s:>10.2f}{1000 * s / n:>10.2f}", flush=True)


if __name__ == "__main__":
    main()
