"""ONNX quantization ops: QuantizeLinear, DequantizeLinear (per-tensor and per-axis, int8 and
uint8; int32 for DequantizeLinear of biases), QLinearConv, QLinearMatMul, ConvInteger and
MatMulInteger.

These are the model's own semantics (round half to even, float scales), run as written when the
QDQ pass (passes/quant/) cannot turn a pattern into an integer kernel. DequantizeLinear is
`nofold`: a dequantized constant weight keeps its int8 form until that pass has seen it (the
pass folds whatever it leaves)."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir import qmath
from glowpy.ir.dtypes import from_onnx
from glowpy.ir.graph import Node, Value
from glowpy.ir.ops.registry import Op, get_op, norm_axis, register

QTYPES = (np.dtype(np.int8), np.dtype(np.uint8))


def _params(node, x, scale, zp, what: str):
    """Checks scale/zero-point shapes: a scalar (or [1]), or 1-D along `axis` (per-axis)."""
    if scale.dtype != np.float32:
        raise ModelError(f"node '{node.name}' ({node.op}): {what} scale must be float32, got "
                         f"{scale.dtype.name}")
    # a scalar beside a one-element 1-D tensor is the same per-tensor parameter (onnxruntime's
    # quantize_static writes such pairs and runs them)
    if zp is not None and zp.shape != scale.shape and \
            not zp.size == 1 == int(np.prod(scale.shape)):
        raise ModelError(f"node '{node.name}' ({node.op}): zero point shape {list(zp.shape)} "
                         f"differs from the scale's {list(scale.shape)}")
    if node.attrs.get("block_size"):
        raise ModelError(f"node '{node.name}' ({node.op}): blocked quantization (block_size) is "
                         "not supported")
    n = int(np.prod(scale.shape))
    if len(scale.shape) > 1 or (len(scale.shape) == 1 and n != 1 and not x.shape):
        raise ModelError(f"node '{node.name}' ({node.op}): scale of shape {list(scale.shape)} "
                         "must be a scalar or 1-D (per-axis)")
    if len(scale.shape) == 1 and n != 1:
        ax = norm_axis(node.attrs.get("axis", 1), len(x.shape), node)
        if x.shape[ax] != n:
            raise ModelError(f"node '{node.name}' ({node.op}): {n} scales for axis {ax} of size "
                             f"{x.shape[ax]}")
        return ax
    return None


@register
class QuantizeLinear(Op):
    inputs = ("x", "y_scale", "y_zero_point?")
    attrs = {"axis": 1, "saturate": 1, "block_size": 0, "output_dtype": 0, "precision": 0}
    since = 10

    def out_dtype(self, node):
        zp = node.input(2)
        if zp is not None:
            return zp.dtype
        if node.attrs["output_dtype"]:
            return from_onnx(node.attrs["output_dtype"], f"node '{node.name}' (QuantizeLinear)")
        return np.dtype(np.uint8)

    def infer(self, node):
        x, s, z = node.inputs[0], node.inputs[1], node.input(2)
        dt = self.out_dtype(node)
        if dt not in QTYPES:
            raise ModelError(f"node '{node.name}' (QuantizeLinear): output type {dt.name} is not "
                             "supported (int8 or uint8)")
        if x.dtype != np.float32:
            raise ModelError(f"node '{node.name}' (QuantizeLinear): input type {x.dtype.name} is "
                             "not supported (float32)")
        _params(node, x, s, z, "y")
        return [(dt, x.shape)]

    def axis(self, node):
        return _params(node, node.inputs[0], node.inputs[1], node.input(2), "y")

    def reference(self, node, x, s, z=None):
        dt = self.out_dtype(node)
        z = np.zeros(s.shape, dt) if z is None else z
        return [qmath.quantize(x, s, z, dt, self.axis(node))]


@register
class DequantizeLinear(Op):
    inputs = ("x", "x_scale", "x_zero_point?")
    attrs = {"axis": 1, "block_size": 0, "output_dtype": 0}
    traits = frozenset({"nofold"})
    since = 10

    def infer(self, node):
        x, s, z = node.inputs[0], node.inputs[1], node.input(2)
        if x.dtype not in QTYPES + (np.dtype(np.int32),):
            raise ModelError(f"node '{node.name}' (DequantizeLinear): input type {x.dtype.name} "
                             "is not supported (int8, uint8 or int32)")
        if z is not None and z.dtype != x.dtype:
            raise ModelError(f"node '{node.name}' (DequantizeLinear): zero point type "
                             f"{z.dtype.name} differs from the input's {x.dtype.name}")
        _params(node, x, s, z, "x")
        return [(np.float32, x.shape)]

    def axis(self, node):
        return _params(node, node.inputs[0], node.inputs[1], node.input(2), "x")

    def reference(self, node, x, s, z=None):
        z = np.zeros(s.shape, x.dtype) if z is None else z
        return [qmath.dequantize(x, s, z, self.axis(node))]


# -- integer convolution and matrix products ---------------------------------------------------

def _sub_zp(a, zp, axis=None):
    a = np.asarray(a, np.int64)
    if zp is None:
        return a
    zp = np.asarray(zp, np.int64)
    if zp.size > 1 and axis is not None:
        shape = [1] * a.ndim
        shape[axis] = zp.size
        zp = zp.reshape(shape)
    else:
        zp = zp.reshape(())
    return a - zp


def int_conv(node, x, w) -> np.ndarray:
    """Conv of integer arrays (zero points already subtracted) with the node's Conv attributes,
    exact in int64 (float64 einsum: products and sums of int8 stay far below 2**53)."""
    conv = get_op("Conv")
    attrs = {k: node.attrs[k] for k in conv.attrs}
    tmp = Node("Conv", node.name, [Value("x", np.float64, x.shape), Value("w", np.float64, w.shape)],
               [], attrs)
    y = conv.reference(tmp, x.astype(np.float64), w.astype(np.float64))[0]
    return np.rint(y).astype(np.int64)


def _conv_infer(node, x, w, out_dtype):
    conv = get_op("Conv")
    tmp = Node("Conv", node.name, [Value("x", np.float32, x.shape), Value("w", np.float32, w.shape)],
               [], {k: node.attrs[k] for k in conv.attrs})
    shape = conv.infer(tmp)[0][1]
    return [(out_dtype, shape)]


CONV_ATTRS = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
              "pads": None, "strides": None}


@register
class ConvInteger(Op):
    inputs = ("x", "w", "x_zero_point?", "w_zero_point?")
    attrs = dict(CONV_ATTRS)
    since = 10
    const_inputs = (1, 2, 3)  # the integer kernel folds weights and zero points

    def infer(self, node):
        return _conv_infer(node, node.inputs[0], node.inputs[1], np.int32)

    def reference(self, node, x, w, xz=None, wz=None):
        y = int_conv(node, _sub_zp(x, xz), _sub_zp(w, wz, 0))
        return [y.astype(np.int32)]


@register
class QLinearConv(Op):
    inputs = ("x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale",
              "y_zero_point", "B?")
    attrs = dict(CONV_ATTRS)
    since = 10
    const_inputs = (1, 2, 3, 4, 5, 6, 7, 8)  # all but x: folded into the integer kernel

    def infer(self, node):
        return _conv_infer(node, node.inputs[0], node.inputs[3], node.inputs[7].dtype)

    def reference(self, node, x, xs, xz, w, ws, wz, ys, yz, b=None):
        acc = int_conv(node, _sub_zp(x, xz), _sub_zp(w, wz, 0))
        if b is not None:
            acc = acc + np.asarray(b, np.int64).reshape((1, -1) + (1,) * (acc.ndim - 2))
        m = (np.float32(xs) * np.asarray(ws, np.float32).reshape(-1) / np.float32(ys))
        m = m.astype(np.float32).reshape((1, -1) + (1,) * (acc.ndim - 2)) if m.size > 1 else m
        y = np.rint(acc.astype(np.float32) * m) + np.int64(yz)
        return [qmath.saturate(y, yz.dtype)]


def int_matmul(a, b) -> np.ndarray:
    return np.matmul(np.asarray(a, np.int64), np.asarray(b, np.int64))


def _matmul_infer(node, a, b, dtype):
    mm = get_op("MatMul")
    tmp = Node("MatMul", node.name, [a, b], [], {})
    return [(dtype, mm.infer(tmp)[0][1])]


@register
class MatMulInteger(Op):
    inputs = ("A", "B", "a_zero_point?", "b_zero_point?")
    since = 10
    const_inputs = (1, 2, 3)

    def infer(self, node):
        return _matmul_infer(node, node.inputs[0], node.inputs[1], np.int32)

    def reference(self, node, a, b, az=None, bz=None):
        # a's zero point is per row (axis -2) when 1-D, b's per column (axis -1)
        a2 = _sub_zp(a, az, a.ndim - 2 if a.ndim >= 2 else None)
        b2 = _sub_zp(b, bz, b.ndim - 1)
        return [int_matmul(a2, b2).astype(np.int32)]


@register
class QLinearMatMul(Op):
    inputs = ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale",
              "y_zero_point")
    since = 10
    const_inputs = ()  # B and every scale may be run-time values (passes/quant/qlinear.py)

    def infer(self, node):
        return _matmul_infer(node, node.inputs[0], node.inputs[3], node.inputs[7].dtype)

    def reference(self, node, a, as_, az, b, bs, bz, ys, yz):
        acc = int_matmul(_sub_zp(a, az, a.ndim - 2 if a.ndim >= 2 else None),
                         _sub_zp(b, bz, b.ndim - 1))
        m = (np.float32(as_) * np.asarray(bs, np.float32) / np.float32(ys)).astype(np.float32)
        y = np.rint(acc.astype(np.float32) * m) + np.int64(yz)
        return [qmath.saturate(y, yz.dtype)]
