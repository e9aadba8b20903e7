"""Quantized operands as the quantization passes see them: integer Values behind
DequantizeLinear with constant parameters, and the integer forms of weights and biases
(zero-point subtraction and folding)."""
from __future__ import annotations

import numpy as np

from glowpy.ir.graph import Node, Value


class Operand:
    """A quantized operand: the integer Value and its (scale, zero point) arrays."""

    def __init__(self, value: Value, scale: np.ndarray, zp: np.ndarray, axis):
        self.value, self.scale, self.zp, self.axis = value, scale, zp, axis

    @property
    def scalar(self) -> bool:
        return self.scale.size == 1

    @property
    def s(self) -> float:
        return float(self.scale.reshape(-1)[0])

    @property
    def z(self) -> int:
        return int(self.zp.reshape(-1)[0])


def qdq_params(node: Node):
    """(scale, zero point, axis) of a QuantizeLinear/DequantizeLinear with constant ones."""
    s, z = node.inputs[1], node.input(2)
    if not s.is_const or (z is not None and not z.is_const) or node.attrs.get("block_size"):
        return None
    dt = node.outputs[0].dtype if node.op == "QuantizeLinear" else node.inputs[0].dtype
    zp = z.const if z is not None else np.zeros(s.shape, dt)
    return np.asarray(s.const, np.float32), np.asarray(zp), node.opdef.axis(node)


def tensor_params(node: Node) -> tuple[float, int] | None:
    """(scale, zero point) of a per-tensor QuantizeLinear/DequantizeLinear, else None."""
    prm = qdq_params(node)
    if prm is None or prm[0].size != 1:
        return None
    return float(prm[0].reshape(-1)[0]), int(prm[1].reshape(-1)[0])


def dq_operand(v: Value, scalar: bool = True) -> Operand | None:
    """v is DequantizeLinear(x) with constant parameters: the integer operand x."""
    p = v.producer
    if v.is_const or p is None or p.op != "DequantizeLinear":
        return None
    prm = qdq_params(p)
    if prm is None or (scalar and prm[0].size != 1):
        return None
    return Operand(p.inputs[0], *prm)


def const_weight(v: Value) -> Operand | None:
    op = dq_operand(v, scalar=False)
    return op if op is not None and op.value.is_const else None


def reads_padding(conv: Node, x: Value | None = None, w: Value | None = None) -> bool:
    """Does any window of the convolution (Conv's attributes; x and w its input and weights)
    reach into padding?"""
    from glowpy.ir.ops.conv import window
    x, w = x or conv.inputs[0], w or conv.inputs[1]
    win = window(conv, x.shape[2:], conv.attrs["kernel_shape"] or w.shape[2:])
    return any(win.pads_begin) or any(win.pads_end)


def fold_zero_point(bias: np.ndarray, w: np.ndarray, zp: int):
    """(bias - zp * sum of each output channel's weights, 0): sum((x - zp) * w) + b equals
    sum(x * w) + b', exactly, when every tap reads the input (no padding), so the kernel
    skips the subtraction. The weights' first axis is the output channel."""
    if zp == 0:
        return bias, 0
    sums = w.reshape(w.shape[0], -1).astype(np.int64).sum(axis=1)
    b = bias.astype(np.int64) - zp * sums
    if np.abs(b).max(initial=0) >= 2 ** 31:
        return bias, zp
    return b.astype(np.int32), 0


def integer_weights(w: np.ndarray, zp, axis: int) -> np.ndarray:
    """int8 weights as they are when every zero point is 0, else int16 with it subtracted;
    `zp` is one zero point or one per slice along `axis`."""
    zp = np.broadcast_to(np.asarray(zp, np.int64).reshape(-1), (w.shape[axis],))
    if w.dtype == np.int8 and not zp.any():
        return np.ascontiguousarray(w)
    shape = [1] * w.ndim
    shape[axis] = zp.size
    return (w.astype(np.int16) - zp.reshape(shape).astype(np.int16)).astype(np.int16)
