"""Quantized contrib ops (com.microsoft QLinearAdd, QLinearMul, QLinearSigmoid,
QLinearLeakyRelu, QLinearAveragePool, QLinearGlobalAveragePool, QLinearConcat,
QLinearSoftmax, QGemm, DynamicQuantizeLSTM) and ONNX's DynamicQuantizeLinear.
quantize_static's QOperator format writes the QLinear ops and QGemm (a classifier's last
Gemm), quantize_dynamic writes DynamicQuantizeLSTM.

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
from glowpy.ir.ops.registry import REQUIRED, register


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
class QLinearAveragePool(Composite):
    """AveragePool and GlobalAveragePool on the QDQ form (the pooling attributes are ONNX's);
    channels_last=1 reads [N, spatial..., C] (the integer data is transposed to channels-first
    and back, the float op stays NCHW)."""
    names = (MS + "QLinearAveragePool", MS + "QLinearGlobalAveragePool")
    inputs = ("X", "x_scale", "x_zero_point?", "y_scale", "y_zero_point?")
    attrs = {"channels_last": 0, "auto_pad": "NOTSET", "ceil_mode": 0, "count_include_pad": 0,
             "kernel_shape": None, "pads": None, "strides": None}
    attr_kinds = {"kernel_shape": list, "pads": list, "strides": list}

    def expand(self, g, node, ins, n_out):
        x, sx, zx, sy, zy = ins + [None] * (5 - len(ins))
        r = len(x.shape)
        if r < 3:
            raise ModelError(f"node '{show(node.name)}' ({node.op}): input of rank {r}; needs "
                             "[N, C, spatial...] (rank >= 3)")
        last = node.attrs["channels_last"]
        if last:
            x = add(g, node, "Transpose", [x], {"perm": [0, r - 1] + list(range(1, r - 1))},
                    tag="to_channels_first")[0]
        op = node.op[len(MS) + 7:]
        attrs = {} if op == "GlobalAveragePool" else \
            {k: v for k, v in node.attrs.items() if k != "channels_last"}
        y = add(g, node, op, [_dq(g, node, x, sx, zx, "dequantize")], attrs)[0]
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


@register
class QLinearSoftmax(Composite):
    """Softmax on the QDQ form, in the semantics of ONNX opset `opset`: below 13 normalized
    over the block from `axis` on, from 13 over `axis`. The default axis is -1 under either
    (onnxruntime's schema default; measured: its opset-12 kernel normalizes [3, 4, 10] over
    the last dim). onnxruntime sums a table of exp(x - max) scaled to integers and divides
    with 1/y_scale truncated to an integer; the QDQ pass's QSoftmax rounds the float softmax:
    equal outputs at quantize_static's y_scale 1/256 (tests/test_contrib_ops.py)."""
    names = (MS + "QLinearSoftmax",)
    inputs = ("X", "X_scale", "x_zero_point?", "y_scale", "y_zero_point?")
    attrs = {"axis": -1, "opset": REQUIRED}
    attr_kinds = {"opset": int}

    def expand(self, g, node, ins, n_out):
        x, sx, zx, sy, zy = ins + [None] * (5 - len(ins))
        attrs = {"axis": node.attrs["axis"]}
        if node.attrs["opset"] < 13:
            attrs["_coerce2d"] = True
        y = add(g, node, "Softmax", [_dq(g, node, x, sx, zx, "dequantize")], attrs)[0]
        return [_q(g, node, y, sy, zy, x.dtype)]


@register
class QGemm(Composite):
    """Gemm of quantized A (per tensor) and B (per tensor or per column): Y = alpha * a_scale *
    b_scale * (C + (A - a_zero_point)(B - b_zero_point)), C int32 on the accumulator's grid;
    quantized to (y_scale, y_zero_point) when y_zero_point is given (scale 1 without y_scale),
    float otherwise (divided by y_scale when that is given), as onnxruntime's kernel
    (contrib_ops/cpu/quantization/qgemm.cc). Expanded in QDQ form with alpha moved into B's
    scale and C dequantized at a_scale * alpha * b_scale, which the QDQ pass folds into QMatMul
    with C as its bias, exactly."""
    names = (MS + "QGemm",)
    inputs = ("A", "a_scale", "a_zero_point", "B", "b_scale", "b_zero_point", "C?", "y_scale?",
              "y_zero_point?")
    attrs = {"alpha": 1.0, "transA": 0, "transB": 0}

    def expand(self, g, node, ins, n_out):
        a, sa, za, b, sb, zb, c, sy, zy = ins + [None] * (9 - len(ins))
        where = f"node '{show(node.name)}' ({node.op})"
        t = node.attrs
        if len(a.shape) != 2 or len(b.shape) != 2:
            raise ModelError(f"{where}: A and B must be matrices, got {list(a.shape)} and "
                             f"{list(b.shape)}")
        n = b.shape[0] if t["transB"] else b.shape[1]
        per_col = sb.size == n and n > 1
        for v, what in ((sa, "a_scale"), (za, "a_zero_point"), (sb, "b_scale"),
                        (zb, "b_zero_point"), (sy, "y_scale"), (zy, "y_zero_point")):
            sizes = (1, n) if what == "b_scale" else (sb.size,) if what == "b_zero_point" else (1,)
            if v is not None and (v.size not in sizes or len(v.shape) > 1):
                want = (f"a scalar or a vector of {n} (one per column of Y)" if what == "b_scale"
                        else "b_scale's size" if what == "b_zero_point" else "a scalar")
                raise ModelError(f"{where}: {what} '{show(v.name)}' must be {want}, got shape "
                                 f"{list(v.shape)}")

        def scalar(v):
            return add(g, node, "Reshape", [v, g.constant(np.array([], np.int64))],
                       tag=f"{v.name}_scalar")[0] if v.shape != () else v
        sa, za = scalar(sa), scalar(za)
        if not per_col:
            sb, zb = scalar(sb), scalar(zb)
        if t["alpha"] != 1.0:
            sb = add(g, node, "Mul", [sb, g.constant(np.float32(t["alpha"]))], tag="alpha_b_scale")[0]
        col = 0 if t["transB"] else 1
        args = [add(g, node, "DequantizeLinear", [a, sa, za], tag="dequantize_a")[0],
                add(g, node, "DequantizeLinear", [b, sb, zb], {"axis": col},
                    tag="dequantize_b")[0]]
        if c is not None:
            if c.dtype != np.int32:
                raise ModelError(f"{where}: C '{show(c.name)}' is {c.dtype.name}; QGemm's C is "
                                 "int32 on the accumulator's grid (a_scale * b_scale)")
            sc = add(g, node, "Mul", [sa, sb], tag="c_scale")[0]
            if not per_col or tuple(c.shape) in ((n,), (1, n)):
                cf = add(g, node, "DequantizeLinear", [c, sc], {"axis": len(c.shape) - 1},
                         tag="dequantize_c")[0]
            else:  # per-column scales broadcast against a C of another shape
                cf = add(g, node, "Cast", [c], {"to": np.dtype(np.float32)}, tag="c_float")[0]
                cf = add(g, node, "Mul", [cf, sc], tag="dequantize_c")[0]
            args.append(cf)
        y = add(g, node, "Gemm", args, {"transA": t["transA"], "transB": t["transB"]})[0]
        if zy is not None:
            return [_q(g, node, y, sy if sy is not None else g.constant(np.float32(1)),
                       scalar(zy), zy.dtype)]
        if sy is not None:
            y = add(g, node, "Div", [y, scalar(sy)], tag="over_y_scale")[0]
        return [y]


@register
class DynamicQuantizeLSTM(Composite):
    """The LSTM onnxruntime's quantize_dynamic writes: ONNX's LSTM (no `layout`) whose W
    [D, input, 4H] and R [D, H, 4H] are int8 or uint8, stored transposed from ONNX's
    [D, 4H, input], with scales and zero points per direction ([D]) or per gate column
    ([D, 4H]).

    onnxruntime rounds the activations to uint8 at run time (X once for every step, h at each
    step) and multiplies in integers. Here the weights are dequantized, (w - zero point) *
    scale, transposed back, and ONNX's LSTM runs on them in float: the quantized model's
    weights, its activations unrounded, so the outputs differ from onnxruntime's by that
    rounding (tests/test_contrib_ops.py measures it) and equal onnxruntime's float LSTM given
    the dequantized weights. The weights take 4 bytes per value in the bundle; an LSTM's
    step-by-step products are latency-bound at the batch sizes it serves, where the float
    recurrence kernel (passes/recurrent.py) is what runs anyway."""
    names = (MS + "DynamicQuantizeLSTM",)
    inputs = ("X", "W", "R", "B?", "sequence_lens?", "initial_h?", "initial_c?", "P?",
              "W_scale", "W_zero_point", "R_scale", "R_zero_point")
    num_outputs = 3
    attrs = {"activation_alpha": None, "activation_beta": None, "activations": None,
             "clip": None, "direction": "forward", "hidden_size": None, "input_forget": 0}
    attr_kinds = {"activation_alpha": list, "activation_beta": list, "activations": tuple,
                  "clip": float, "hidden_size": int}

    def _weights(self, g, node, w, scale, zp, what):
        """[D, K, 4H] integers -> float [D, 4H, K]."""
        where = f"node '{show(node.name)}' ({node.op})"
        if len(w.shape) != 3 or w.dtype not in (np.int8, np.uint8):
            raise ModelError(f"{where}: {what} '{show(w.name)}' must be a 3-D int8 or uint8 tensor "
                             f"[directions, inputs, 4*hidden], got {w.dtype.name} {list(w.shape)}")
        d, _, n = w.shape
        for v, name, dtype in ((scale, "scale", np.dtype(np.float32)), (zp, "zero_point", w.dtype)):
            if v.dtype != dtype or tuple(v.shape) not in ((d,), (d, n)):
                raise ModelError(f"{where}: {what}_{name} '{show(v.name)}' must be {dtype.name} "
                                 f"of shape [{d}] (per direction) or [{d}, {n}] (per column), got "
                                 f"{v.dtype.name} {list(v.shape)}")

        def per(v, name):  # [D] -> [D, 1, 1]; [D, 4H] -> [D, 1, 4H]: broadcast over K
            shape = (d, 1, 1) if len(v.shape) == 1 else (d, 1, n)
            return add(g, node, "Reshape", [v, g.constant(np.array(shape, np.int64))],
                       tag=f"{what}_{name}_shape")[0]
        f32 = {"to": np.dtype(np.float32)}
        wf = add(g, node, "Cast", [w], f32, tag=f"{what}_float")[0]
        zf = add(g, node, "Cast", [per(zp, "zero_point")], f32, tag=f"{what}_zero_point_float")[0]
        wf = add(g, node, "Sub", [wf, zf], tag=f"{what}_centred")[0]
        wf = add(g, node, "Mul", [wf, per(scale, "scale")], tag=f"{what}_dequantized")[0]
        return add(g, node, "Transpose", [wf], {"perm": [0, 2, 1]}, tag=f"{what}_onnx_layout")[0]

    def expand(self, g, node, ins, n_out):
        x, w, r, b, lens, h0, c0, p, ws, wz, rs, rz = ins + [None] * (12 - len(ins))
        if any(v is None for v in (ws, wz, rs, rz)):
            raise ModelError(f"node '{show(node.name)}' ({node.op}): needs W_scale, W_zero_point, "
                             "R_scale and R_zero_point (inputs 9 to 12)")
        args = [x, self._weights(g, node, w, ws, wz, "W"), self._weights(g, node, r, rs, rz, "R"),
                b, lens, h0, c0, p]
        while args[-1] is None:
            args.pop()
        attrs = dict(node.attrs)
        if attrs["activations"] is not None:
            attrs["activations"] = [str(a) for a in attrs["activations"]]
        return add(g, node, "LSTM", args, attrs, n_out, tag="lstm")
