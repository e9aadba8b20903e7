"""Seed models and choosers for tools/fuzz.py: `RandomChooser` drives long runs,
`HypothesisChooser` hypothesis' `data` in tests/test_fuzz.py (fixed seed, shrinking)."""
from __future__ import annotations

import os
import random

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# -- choosers ---------------------------------------------------------------------------------

class RandomChooser:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def int(self, lo, hi):
        return self.r.randint(lo, hi)

    def choice(self, seq):
        seq = list(seq)
        return seq[self.int(0, len(seq) - 1)]

    def bool(self, p=0.5):
        return self.r.random() < p

    def bytes(self, n):
        return bytes(self.r.getrandbits(8) for _ in range(n))


class HypothesisChooser(RandomChooser):
    """The same interface over hypothesis' `data.draw`, so hypothesis can shrink a failure."""

    def __init__(self, data):
        from hypothesis import strategies as st
        self.data, self.st = data, st

    def int(self, lo, hi):
        return self.data.draw(self.st.integers(lo, hi))

    def bool(self, p=0.5):
        return self.data.draw(self.st.booleans())

    def bytes(self, n):
        return self.data.draw(self.st.binary(min_size=n, max_size=n))


# -- seed models ------------------------------------------------------------------------------

def _vi(name, shape, et=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, et, shape)


def _init(name, shape, rng, dtype=np.float32):
    a = (rng.standard_normal(shape) * 0.5).astype(dtype) if dtype == np.float32 else \
        np.asarray(shape, dtype)
    return numpy_helper.from_array(a, name)


def _model(nodes, inputs, outputs, inits=(), opset=17, name="seed"):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="glowpy-fuzz")
    m.ir_version = 8
    return m


def builtin_seeds() -> list[onnx.ModelProto]:
    """Small valid models covering the main op families (each compiles in well under 1 s)."""
    rng = np.random.default_rng(0)
    n = helper.make_node
    seeds = []
    # a small CNN: Conv -> Relu -> MaxPool -> Reshape -> Gemm -> Softmax
    seeds.append(_model(
        [n("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv"),
         n("Relu", ["c"], ["r"], name="relu"),
         n("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
         n("Reshape", ["p", "shape"], ["f"], name="flat"),
         n("Gemm", ["f", "fw", "fb"], ["g"], transB=1, name="fc"),
         n("Softmax", ["g"], ["y"], axis=1, name="softmax")],
        [_vi("x", [1, 2, 8, 8])], [_vi("y", [1, 5])],
        [_init("w", [4, 2, 3, 3], rng), _init("b", [4], rng),
         numpy_helper.from_array(np.array([1, 64], np.int64), "shape"),
         _init("fw", [5, 64], rng), _init("fb", [5], rng)], name="cnn"))
    # elementwise with broadcasting and unary math
    seeds.append(_model(
        [n("Add", ["a", "b"], ["s"]), n("Mul", ["s", "k"], ["m"]), n("Sigmoid", ["m"], ["g"]),
         n("Sub", ["g", "a"], ["d"]), n("Tanh", ["d"], ["t"]), n("Div", ["t", "k"], ["q"]),
         n("Clip", ["q", "lo", "hi"], ["y"])],
        [_vi("a", [2, 3, 4]), _vi("b", [3, 1])], [_vi("y", [2, 3, 4])],
        [_init("k", [4], rng), numpy_helper.from_array(np.float32(-1), "lo"),
         numpy_helper.from_array(np.float32(1), "hi")], name="eltwise"))
    # data movement
    seeds.append(_model(
        [n("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
         n("Concat", ["t", "t"], ["c"], axis=1),
         n("Slice", ["c", "st", "en", "ax"], ["s"]),
         n("Unsqueeze", ["s", "ua"], ["u"]),
         n("Squeeze", ["u", "ua"], ["q"]),
         n("Flatten", ["q"], ["f"], axis=1),
         n("Gather", ["f", "idx"], ["y"], axis=1)],
        [_vi("x", [2, 3, 4])], [_vi("y", [2, 3])],
        [numpy_helper.from_array(np.array([1], np.int64), "st"),
         numpy_helper.from_array(np.array([5], np.int64), "en"),
         numpy_helper.from_array(np.array([1], np.int64), "ax"),
         numpy_helper.from_array(np.array([1], np.int64), "ua"),
         numpy_helper.from_array(np.array([0, 2, 5], np.int64), "idx")], name="movement"))
    # matmul, reductions, normalization
    seeds.append(_model(
        [n("MatMul", ["x", "w"], ["m"]),
         n("BatchNormalization", ["m4", "sc", "bi", "mu", "va"], ["bn"]),
         n("Reshape", ["m", "s4"], ["m4"]),
         n("ReduceMean", ["bn"], ["rm"], axes=[2, 3], keepdims=1),
         n("GlobalAveragePool", ["bn"], ["gp"]),
         n("Add", ["rm", "gp"], ["y"])],
        [_vi("x", [1, 4, 6])], [_vi("y", [1, 4, 1, 1])],
        [_init("w", [6, 6], rng), numpy_helper.from_array(np.array([1, 4, 2, 3], np.int64), "s4"),
         _init("sc", [4], rng), _init("bi", [4], rng), _init("mu", [4], rng),
         numpy_helper.from_array(np.abs(rng.standard_normal(4)).astype(np.float32) + 0.1, "va")],
        opset=13, name="reduce"))
    # pooling / padding / pointwise convs, two outputs
    seeds.append(_model(
        [n("Pad", ["x", "pads"], ["p"], mode="constant"),
         n("AveragePool", ["p"], ["a"], kernel_shape=[3, 3], strides=[1, 1]),
         n("Conv", ["a", "w"], ["c"], kernel_shape=[1, 1], group=1),
         n("LeakyRelu", ["c"], ["y1"], alpha=0.1),
         n("ReduceMax", ["x"], ["y2"], axes=[1], keepdims=0)],
        [_vi("x", [1, 3, 5, 5])], [_vi("y1", [1, 2, 5, 5]), _vi("y2", [1, 5, 5])],
        [numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
         _init("w", [2, 3, 1, 1], rng)], opset=13, name="pool2"))
    # an older opset (attribute forms that later became inputs)
    seeds.append(_model(
        [n("Reshape", ["x"], ["r"], shape=[2, 6]),
         n("Relu", ["r"], ["y"])],
        [_vi("x", [3, 4])], [_vi("y", [2, 6])], opset=4, name="old"))
    return seeds


def shared_seeds() -> list[onnx.ModelProto]:
    """The small real models of ../shared/models (fast to compile)."""
    d = os.path.join(os.path.dirname(REPO), "shared", "models")
    out = []
    for name in ("mnist8", "mnist_onnx2c_atmega14x14"):
        p = os.path.join(d, name + ".onnx")
        if os.path.exists(p):
            out.append(onnx.load(p))
    return out


def onnx_node_seeds(max_bytes=1 << 16) -> list[onnx.ModelProto]:
    """The single-node models of onnx's backend tests whose ops glowpy knows."""
    import warnings
    from glowpy.ir.ops import has_op
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            from onnx.backend.test.case.node import collect_testcases
            raw = collect_testcases(None)
    out = []
    for tc in raw:
        m = tc.model
        if m is None or "_expanded" in tc.name or m.ByteSize() > max_bytes:
            continue
        if all(has_op(nd.op_type) and nd.domain in ("", "ai.onnx") for nd in m.graph.node):
            out.append(m)
    return out
