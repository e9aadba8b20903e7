#!/usr/bin/env python3
"""Builds the two benchmark networks that are not in ../shared/models: ResNet-18 and
MobileNetV2 (224x224 ImageNet shapes, 1000 classes), with random weights, BatchNormalization
left as separate nodes, opset 13. Written with onnx's helper API only (no torch/torchvision).

    python benchmarks/build_models.py [--out build/benchmarks]

Weights are drawn from a fixed seed with He-style scales, and each BatchNormalization gets
random statistics that keep activations near unit variance, so the outputs stay finite and
meaningful (comparable to onnxruntime's within the model tolerance). The files go to a build
directory and are not committed."""
from __future__ import annotations

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "build", "benchmarks")
OPSET = 13


class Net:
    """A tiny graph builder: conv/bn/relu/add... append nodes and initializers."""

    def __init__(self, name: str, seed: int):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.n = 0

    def _name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def init(self, base, array):
        name = self._name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def node(self, op, inputs, **attrs):
        out = self._name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x, cin, cout, k, stride=1, group=1, bias=False):
        fan_in = cin // group * k * k
        w = self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan_in)
        ins = [x, self.init("w", w)]
        if bias:
            ins.append(self.init("b", self.rng.standard_normal(cout) * 0.1))
        p = k // 2
        return self.node("Conv", ins, kernel_shape=[k, k], strides=[stride, stride],
                         pads=[p, p, p, p], group=group)

    def bn(self, x, c):
        scale = self.rng.uniform(0.5, 1.0, c)
        shift = self.rng.standard_normal(c) * 0.1
        mean = self.rng.standard_normal(c) * 0.1
        var = self.rng.uniform(0.5, 1.5, c)
        return self.node("BatchNormalization", [x, self.init("scale", scale), self.init("shift", shift),
                                                 self.init("mean", mean), self.init("var", var)],
                         epsilon=1e-5)

    def conv_bn(self, x, cin, cout, k, stride=1, group=1, act="relu"):
        y = self.bn(self.conv(x, cin, cout, k, stride, group), cout)
        if act == "relu":
            return self.node("Relu", [y])
        if act == "relu6":
            return self.node("Clip", [y, self.init("lo", np.float32(0)), self.init("hi", np.float32(6))])
        return y

    def inverted_residual(self, x, cin, hidden, cout, k=3, stride=1, act="relu6", se=None):
        """MobileNetV2's block (MobileNetV3's and EfficientNet's MBConv too): a 1x1 expansion
        unless hidden == cin, the k x k depthwise, `se(y, hidden)` if given (squeeze and
        excitation), the linear 1x1 projection, and the residual Add when the shape is kept."""
        y = x if hidden == cin else self.conv_bn(x, cin, hidden, 1, act=act)
        y = self.conv_bn(y, hidden, hidden, k, stride, group=hidden, act=act)
        if se is not None:
            y = se(y, hidden)
        y = self.conv_bn(y, hidden, cout, 1, act=None)
        return self.node("Add", [x, y]) if stride == 1 and cin == cout else y

    def head(self, x, c, classes=1000):
        x = self.node("GlobalAveragePool", [x])
        x = self.node("Flatten", [x], axis=1)
        w = self.rng.standard_normal((classes, c)) * np.sqrt(1.0 / c)
        return self.node("Gemm", [x, self.init("fc_w", w), self.init("fc_b", np.zeros(classes))],
                         transB=1)

    def model(self, x_name, out, shape=(1, 3, 224, 224)) -> onnx.ModelProto:
        g = helper.make_graph(
            self.nodes, self.name, [helper.make_tensor_value_info(x_name, TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, (shape[0], 1000))], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="glowpy-benchmarks")
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def resnet18() -> onnx.ModelProto:
    net = Net("resnet18", 18)
    x = net.conv_bn("input", 3, 64, 7, 2)
    x = net.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            y = net.conv_bn(x, cin, cout, 3, stride)
            y = net.conv_bn(y, cout, cout, 3, 1, act=None)
            short = x if stride == 1 and cin == cout else net.conv_bn(x, cin, cout, 1, stride, act=None)
            x = net.node("Relu", [net.node("Add", [y, short])])
            cin = cout
    return net.model("input", net.head(x, 512))


def mobilenetv2() -> onnx.ModelProto:
    net = Net("mobilenetv2", 2)
    x = net.conv_bn("input", 3, 32, 3, 2, act="relu6")
    cin = 32
    # (expansion t, channels c, repeats n, first stride s): the MobileNetV2 paper's table 2
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            x = net.inverted_residual(x, cin, cin * t, c, stride=s if i == 0 else 1)
            cin = c
    x = net.conv_bn(x, cin, 1280, 1, act="relu6")
    return net.model("input", net.head(x, 1280))


MODELS = {"resnet18": resnet18, "mobilenetv2": mobilenetv2}


def build(out_dir: str = DEFAULT_OUT) -> dict:
    """Writes every model (if missing) and returns {name: path}."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for name, fn in MODELS.items():
        path = os.path.join(out_dir, name + ".onnx")
        if not os.path.exists(path):
            onnx.save(fn(), path)
        paths[name] = path
    return paths


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    ap.add_argument("--force", action="store_true", help="rebuild even if the files exist")
    a = ap.parse_args(argv)
    if a.force:
        for name in MODELS:
            p = os.path.join(a.out, name + ".onnx")
            if os.path.exists(p):
                os.remove(p)
    for name, path in build(a.out).items():
        print(f"{name}: {path} ({os.path.getsize(path) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
