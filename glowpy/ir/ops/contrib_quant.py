"""Quantized contrib ops (com.microsoft QLinearAdd, QLinearMul, QLinearSigmoid,
QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearConcat) and ONNX's DynamicQuantizeLinear.

The QLinear ops expand to their QDQ form, DequantizeLinear -> float op -> QuantizeLinear, which
is what they mean; the QDQ pass (passes/quant/) then turns that into the integer kernels
(QAdd, QMul, QTable, QAvgPool, Requantize + Concat) when scales and zero points are constants,
and the float QuantizeLinear/DequantizeLinear kernels run it otherwise (and at -O0).
onnxruntime computes these ops in float (MLAS: scale ratios, round half to even) and the
integer kernels requantize in fixed point, so they agree within 1 LSB
(tests/test_contrib_ops.py measures it); QLinearSigmoid/LeakyRelu/Concat become tables or
copies computed from the float semantics, exact up to onnxruntime's own Sigmoid.

DynamicQuantizeLinear's scale and zero point come from the data (run-time min/max), so it
expands to run-time ops: ReduceMin/ReduceMax, the scale and zero-point arithmetic in float32,
and QuantizeLinear with run-time parameters; its reference is onnxruntime's kernel
(providers/cpu/quantization/dynamicquantizelinear.cc, core/util/qmath.h)."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError, show
from glowpy.ir import qmath
from glowpy.ir.ops.contrib import MS, Composite, add
from glowpy.ir.ops.registry import register


def _zero(g, v, dtype):
    return v if v is not None else g.constant(np.zeros((), dtype), "zero_point")


def _dq(g, node, x, s, z, tag):
    return add(g, node, "DequantizeLinear", [x, s, _zero(g, z, x.dtype)], tag=tag)[0]


def _q(g, node, y, s, z, dtype, tag="quantize"):
    return add(g, node, "QuantizeLinear", [y, s, _zero(g, z, dtype)], tag=tag)[0]


@register
class QLinearBinary(Composite):
    """C = quantize(op(dequantize(A), dequantize(B))), op Add or Mul (broadcasting)."""
    names = (MS + "QLinearAdd", MS + "QLinearMul")
    inputs = ("A", "A_scale", "A_zero_point?", "B", "B_scale", "B_zero_point?", "C_scale",
              "C_zero_point?")

    def expand(self, g, node, ins, n_out):
        a, sa, za, b, sb, zb, sc, zc = ins + [None] * (8 - len(ins))
        y = add(g, node, node.op[len(MS) + 7:], [_dq(g, node, a, sa, za, "dequantize_a"),
                                                 _dq(g, node, b, sb, zb, "dequantize_b")])[0]
        return [_q(g, node, y, sc, zc, a.dtype)]


@register
class QLinearUnary(Composite):
    """Y = quantize(f(dequantize(X))), f Sigmoid or LeakyRelu(alpha)."""
    names = (MS + "QLinearSigmoid", MS + "QLinearLeakyRelu")
    inputs = ("X", "X_scale", "X_zero_point?", "Y_scale", "Y_zero_point?")
    attrs = {"alpha": 0.01}

    def expand(self, g, node, ins, n_out):
        x, sx, zx, sy, zy = ins + [None] * (5 - len(ins))
        op = node.op[len(MS) + 7:]
        attrs = {"alpha": node.attrs["alpha"]} if op == "LeakyRelu" else {}
        y = add(g, node, op, [_dq(g, node, x, sx, zx, "dequantize")], attrs)[0]
        return [_q(g, node, y, sy, zy, x.dtype)]


@register
class QLinearGlobalAveragePool(Composite):
    """GlobalAveragePool on the QDQ form; channels_last=1 reads [N, spatial..., C] (the
    integer data is transposed to channels-first and back, the float op stays NCHW)."""
    names = (MS + "QLinearGlobalAveragePool",)
    inputs = ("X", "x_scale", "x_zero_point", "y_scale", "y_zero_point")
    attrs = {"channels_last": 0}

    def expand(self, g, node, ins, n_out):
        x, sx, zx, sy, zy = ins
        r = len(x.shape)
        if r < 3:
            raise ModelError(f"node '{show(node.name)}' ({node.op}): input of rank {r}; needs "
                             "[N, C, spatial...] (rank >= 3)")
        last = node.attrs["channels_last"]
        if last:
            x = add(g, node, "Transpose", [x], {"perm": [0, r - 1] + list(range(1, r - 1))},
                    tag="to_channels_first")[0]
        y = add(g, node, "GlobalAveragePool", [_dq(g, node, x, sx, zx, "dequantize")])[0]
        y = _q(g, node, y, sy, zy, x.dtype)
        if last:
            y = add(g, node, "Transpose", [y], {"perm": [0] + list(range(2, r)) + [1]},
                    tag="to_channels_last")[0]
        return [y]


@register
class QLinearConcat(Composite):
    """Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input: each input requantized
    to Y's grid, concatenated along `axis`."""
    names = (MS + "QLinearConcat",)
    inputs = ("Y_scale", "Y_zero_point", "inputs*")
    attrs = {"axis": None}
    attr_kinds = {"axis": int}

    def expand(self, g, node, ins, n_out):
        sy, zy, rest = ins[0], ins[1], ins[2:]
        if not rest or len(rest) % 3:
            raise ModelError(f"node '{show(node.name)}' ({node.op}): takes Y_scale, Y_zero_point "
                             f"and (X, X_scale, X_zero_point) triples; got {len(ins)} inputs")
        if node.attrs["axis"] is None:
            raise ModelError(f"node '{show(node.name)}' ({node.op}): missing required attribute "
                             "'axis'")
        parts = [_dq(g, node, rest[i], rest[i + 1], rest[i + 2], f"dequantize_{i // 3}")
                 for i in range(0, len(rest), 3)]
        y = add(g, node, "Concat", parts, {"axis": node.attrs["axis"]})[0]
        return [_q(g, node, y, sy, zy, rest[0].dtype)]


@register
class DynamicQuantizeLinear(Composite):
    """y, y_scale, y_zero_point of float x, uint8: the range [min(x), max(x)] widened to take
    0, scale = range / 255 (1 when the range is empty), zero point = round_half_even(clamp(
    0 - min / scale, 0, 255)), y = QuantizeLinear(x, scale, zero point); all float32, in
    onnxruntime's order of operations."""
    inputs = ("x",)
    num_outputs = 3
    since = 11

    def expand(self, g, node, ins, n_out):
        x = ins[0]
        if x.dtype != np.float32:
            raise ModelError(f"node '{show(node.name)}' ({node.op}): input type {x.dtype.name} is "
                             "not supported (float32)")

        def f(v):
            return g.constant(np.float32(v))
        lo = add(g, node, "Min", [add(g, node, "ReduceMin", [x], {"keepdims": 0})[0], f(0)])[0]
        hi = add(g, node, "Max", [add(g, node, "ReduceMax", [x], {"keepdims": 0})[0], f(0)])[0]
        span = add(g, node, "Sub", [hi, lo], tag="range")[0]
        scale = add(g, node, "Div", [span, f(255)], tag="scale")[0]
        empty = add(g, node, "Equal", [span, f(0)])[0]
        scale = add(g, node, "Where", [empty, f(1), scale])[0]
        zp = add(g, node, "Div", [lo, scale], tag="min_over_scale")[0]
        zp = add(g, node, "Sub", [f(0), zp], tag="zero_point")[0]
        zp = add(g, node, "Clip", [zp, f(0), f(255)])[0]
        zp = add(g, node, "Cast", [add(g, node, "Round", [zp])[0]], {"to": np.dtype(np.uint8)})[0]
        return [_q(g, node, x, scale, zp, np.uint8), scale, zp][:n_out]

    def reference(self, node, x):
        x = np.asarray(x, np.float32)
        lo = np.minimum(x.min(), np.float32(0))
        hi = np.maximum(x.max(), np.float32(0))
        scale = np.float32(1) if hi == lo else np.float32((hi - lo) / np.float32(255))
        zp = np.float32(0) - np.float32(lo / scale)
        zp = np.uint8(np.rint(np.clip(zp, np.float32(0), np.float32(255))))
        y = qmath.quantize(x, scale, zp, np.uint8)
        return [y, np.asarray(scale, np.float32), np.asarray(zp, np.uint8)][:self.wanted(node)]
