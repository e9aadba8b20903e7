"""Internal integer ops: what the QDQ pass (passes/quant/) turns quantized patterns into.

Every one computes on int8/uint8 tensors with int32 accumulation and ends in the fixed-point
requantization of qmath.py (multiplier q, shift s, rounding `mode`), saturation and the clamp
[lo, hi] of a fused Relu/Clip. Their numpy references are the exact integer arithmetic the
kernels (codegen/kernels/qconv.py, qmatmul.py, quant.py) perform, so they are the test oracle.

  QConv        X, W (int8, or int16 when the weight zero point was subtracted), B (int32 bias),
               M, S (int32 per output channel) -> int8/uint8, or int32 when out_dtype is int32
               (ConvInteger); attributes as Conv's plus x_zp, y_zp, lo, hi, mode.
  QMatMul      A [..., K], B [N, K] constant (one row per output column, so the kernel's dot
               products read both operands contiguously), Bias [N], M, S [N] -> [..., N].
  QAdd, QMul   TFLite's integer Add (inputs scaled to a common 2**-20 grid, then requantized)
               and Mul.
  QAvgPool     window sums divided by the tap count with the mode's rounding (same scales), or
               requantized (different scales, uniform tap count).
  QSoftmax     TFLite's int8 softmax: exp(x - max) from a 256-entry float table T, float
               normalization, rounded to the output grid.
  QTable       y = T[x - min(dtype)]: any unary op of an int8 value as a 256-entry table.
  Requantize   y = clamp(requantize(x - x_zp) + y_zp): scale changes, Relu/Clip alone.
  QFinish      X float32 holding exact integer sums (a float Conv or MatMul of integer
               operands, from passes/quant/float_exact.py), B (int32 bias), M, S per channel
               of `axis`, and more such sums (chunks of the input channels) -> the QConv's /
               QMatMul's output: the sums added as integers, the same bias, requantization,
               clamp and type."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir import qmath
from glowpy.ir.graph import Node
from glowpy.ir.ops.conv import _gather_windows, window
from glowpy.ir.ops.quant import CONV_ATTRS, _conv_infer, int_conv
from glowpy.ir.ops.registry import Op, broadcast_shapes, register

REQ = {"y_zp": 0, "lo": -128, "hi": 127, "mode": "away", "out_dtype": "int8"}


def finish(acc, q, s, node) -> np.ndarray:
    """requantize + y_zp, clamped to [lo, hi], in the output type."""
    a = node.attrs
    y = qmath.requantize(acc, q, s, a["mode"]) + a["y_zp"]
    return np.clip(y, a["lo"], a["hi"]).astype(a["out_dtype"])


def _chan(v, ndim, axis=1):
    v = np.asarray(v, np.int64).reshape(-1)
    if v.size == 1:
        return v.reshape(())
    shape = [1] * ndim
    shape[axis] = v.size
    return v.reshape(shape)


class IntOp(Op):
    traits = frozenset({"internal"})
    since = 0


@register
class QConv(IntOp):
    inputs = ("X", "W", "B", "M", "S")
    attrs = dict(CONV_ATTRS, x_zp=0, **REQ)

    def window(self, node):
        x, w = node.inputs[0], node.inputs[1]
        return window(node, x.shape[2:], node.attrs["kernel_shape"] or w.shape[2:], weighted=True)

    def infer(self, node):
        return _conv_infer(node, node.inputs[0], node.inputs[1], np.dtype(node.attrs["out_dtype"]))

    def reference(self, node, x, w, b, m, s):
        acc = int_conv(node, np.asarray(x, np.int64) - node.attrs["x_zp"], w)
        acc = acc + _chan(b, acc.ndim)
        if node.attrs["out_dtype"] == "int32":
            return [acc.astype(np.int32)]
        return [finish(acc, _chan(m, acc.ndim), _chan(s, acc.ndim), node)]


@register
class QMatMul(IntOp):
    inputs = ("A", "B", "Bias", "M", "S")
    attrs = dict(a_zp=0, **REQ)

    def infer(self, node):
        a, b = node.inputs[0], node.inputs[1]
        if len(b.shape) != 2 or not a.shape or a.shape[-1] != b.shape[1]:
            raise ModelError(f"node '{node.name}' (QMatMul): shapes {list(a.shape)} x "
                             f"{list(b.shape)}^T do not multiply")
        return [(np.dtype(node.attrs["out_dtype"]), a.shape[:-1] + (b.shape[0],))]

    def reference(self, node, a, b, bias, m, s):
        acc = np.matmul(np.asarray(a, np.int64) - node.attrs["a_zp"], np.asarray(b, np.int64).T)
        acc = acc + np.asarray(bias, np.int64).reshape(-1)
        if node.attrs["out_dtype"] == "int32":
            return [acc.astype(np.int32)]
        nd = acc.ndim
        return [finish(acc, _chan(m, nd, nd - 1), _chan(s, nd, nd - 1), node)]


@register
class QAdd(IntOp):
    """y = requantize(rescale(a - a_zp, a_q, a_s) + rescale(b - b_zp, b_q, b_s), y_q, y_s): the
    operands are first brought to a common scale 2**-left_shift finer than the larger input
    scale (TFLite's quantized Add); QMul multiplies (a - a_zp) * (b - b_zp) and requantizes."""
    names = ("QAdd", "QMul")
    inputs = ("A", "B")
    attrs = dict(a_zp=0, b_zp=0, a_q=0, a_s=0, b_q=0, b_s=0, y_q=0, y_s=0, left_shift=20, **REQ)

    def infer(self, node):
        a, b = node.inputs[0], node.inputs[1]
        return [(np.dtype(node.attrs["out_dtype"]), broadcast_shapes(node, a.shape, b.shape))]

    def reference(self, node, a, b):
        t = node.attrs
        da = np.asarray(a, np.int64) - t["a_zp"]
        db = np.asarray(b, np.int64) - t["b_zp"]
        if node.op == "QMul":
            return [finish(da * db, t["y_q"], t["y_s"], node)]
        ra = qmath.requantize(da << t["left_shift"], t["a_q"], t["a_s"], "away")
        rb = qmath.requantize(db << t["left_shift"], t["b_q"], t["b_s"], "away")
        return [finish(ra + rb, t["y_q"], t["y_s"], node)]


def div_round(acc, count, mode: str) -> np.ndarray:
    """acc / count rounded half away from zero (TFLite's AveragePool) or half to even."""
    acc, count = np.asarray(acc, np.int64), np.asarray(count, np.int64)
    if mode == "away":
        half = count // 2
        num = np.where(acc > 0, acc + half, acc - half)
        return np.where(num >= 0, num // count, -((-num) // count))
    q = acc // count  # floor
    r2 = 2 * (acc - q * count)
    return q + ((r2 > count) | ((r2 == count) & (q & 1 == 1)))


@register
class QAvgPool(IntOp):
    """AveragePool of int8 values. With d = sum(x - x_zp) over the window's taps inside the
    input (padding is real 0, so it adds nothing even when count_include_pad counts it):
    same input and output scale -> exact division by the count (away: (d + count*y_zp) / count,
    TFLite; even: d / count + y_zp, ONNX); different scales -> requantize(d, q, s) + y_zp
    (uniform counts)."""
    inputs = ("X",)
    attrs = {"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None, "kernel_shape": None,
             "pads": None, "strides": None, "count_include_pad": 0, "x_zp": 0, "same_scale": 1,
             "q": 0, "s": 0, **REQ}

    def window(self, node):
        x = node.inputs[0]
        return window(node, x.shape[2:], node.attrs["kernel_shape"], bool(node.attrs["ceil_mode"]))

    def counts(self, node) -> np.ndarray:
        from glowpy.ir.ops import get_op
        return np.rint(get_op("AveragePool").divisors(node)).astype(np.int64)

    def taps(self, node) -> np.ndarray:
        """Per output position: the taps inside the input (the counts without padding)."""
        from glowpy.ir.ops import get_op
        inner = Node(node.op, node.name, node.inputs, node.outputs,
                     dict(node.attrs, count_include_pad=0))
        return np.rint(get_op("AveragePool").divisors(inner)).astype(np.int64)

    def infer(self, node):
        x = node.inputs[0]
        return [(np.dtype(node.attrs["out_dtype"]), x.shape[:2] + self.window(node).out_size)]

    def reference(self, node, x):
        t = node.attrs
        win = self.window(node)
        cols = _gather_windows(np.asarray(x, np.int64), win, 0)
        s = cols.reshape(cols.shape[:2 + len(win.out_size)] + (-1,)).sum(-1)
        c = self.counts(node)
        d = s - self.taps(node) * t["x_zp"]
        if not t["same_scale"]:
            y = qmath.requantize(d, t["q"], t["s"], t["mode"]) + t["y_zp"]
        elif t["mode"] == "away":
            y = div_round(d + c * t["y_zp"], c, "away")
        else:
            y = div_round(d, c, "even") + t["y_zp"]
        return [np.clip(y, t["lo"], t["hi"]).astype(t["out_dtype"])]


def softmax_table(x_scale: float, beta: float = 1.0) -> np.ndarray:
    """T[d] = expf(-x_scale * beta * d), d = max - x in 0..255 (TFLite's lookup table)."""
    d = np.arange(256, dtype=np.float32)
    return np.exp(np.float32(-x_scale * beta) * d).astype(np.float32)


@register
class QSoftmax(IntOp):
    inputs = ("X", "T")
    attrs = dict(axis=-1, y_scale=1.0, **REQ)

    def layout(self, node):
        from glowpy.ir.ops import get_op
        return get_op("Softmax").layout(node)

    def infer(self, node):
        x = node.inputs[0]
        self.layout(node)
        return [(np.dtype(node.attrs["out_dtype"]), x.shape)]

    def reference(self, node, x, table):
        t = node.attrs
        o, r, i = self.layout(node)
        x3 = np.asarray(x, np.int64).reshape(o, r, i)
        e = np.asarray(table, np.float32)[x3.max(axis=1, keepdims=True) - x3]
        total = np.zeros((o, 1, i), np.float32)
        for j in range(r):  # sequential float32 sum, as the kernel adds
            total = (total + e[:, j:j + 1, :]).astype(np.float32)
        inv = (np.float32(1) / (total * np.float32(t["y_scale"]))).astype(np.float32)
        p = (e * inv).astype(np.float32)
        rounded = qmath.round_half_away(p) if t["mode"] == "away" else np.rint(p)
        y = rounded.astype(np.int64) + t["y_zp"]
        return [np.clip(y, t["lo"], t["hi"]).astype(t["out_dtype"]).reshape(x.shape)]


@register
class QTable(IntOp):
    inputs = ("X", "T")
    attrs = {}

    def infer(self, node):
        x, t = node.inputs[0], node.inputs[1]
        if t.shape != (256,) or x.dtype.itemsize != 1:
            raise ModelError(f"node '{node.name}' (QTable): needs an 8-bit input and 256 entries")
        return [(t.dtype, x.shape)]

    def reference(self, node, x, table):
        lo = np.iinfo(x.dtype).min
        return [np.asarray(table)[np.asarray(x, np.int64) - lo]]


@register
class Requantize(IntOp):
    inputs = ("X",)
    attrs = dict(x_zp=0, q=1 << 30, s=1, **REQ)

    def infer(self, node):
        return [(np.dtype(node.attrs["out_dtype"]), node.inputs[0].shape)]

    def reference(self, node, x):
        t = node.attrs
        return [finish(np.asarray(x, np.int64) - t["x_zp"], t["q"], t["s"], node)]


@register
class QFinish(IntOp):
    """axis: the channel axis of the bias and the requantization tables (a Conv's 1, a
    MatMul's last). An int32 output is the sum itself (ConvInteger, MatMulInteger). ties=0: no
    accumulator the inputs allow meets a rounding tie (qmath.ties_possible), so the kernel may
    leave out the tie correction; the result is the same. Parts: the sums over further chunks
    of the input channels, each exact in float32, added to X as integers."""
    inputs = ("X", "B", "M", "S", "parts*")
    attrs = dict(REQ, ties=1, axis=1)

    def infer(self, node):
        return [(np.dtype(node.attrs["out_dtype"]), node.inputs[0].shape)]

    def reference(self, node, x, b, m, s, *parts):
        acc = sum((np.asarray(p, np.int64) for p in parts), np.asarray(x, np.int64))
        nd, ax = acc.ndim, node.attrs["axis"] % acc.ndim
        acc = acc + _chan(b, nd, ax)
        if node.attrs["out_dtype"] == "int32":
            return [acc.astype(np.int32)]
        return [finish(acc, _chan(m, nd, ax), _chan(s, nd, ax), node)]
