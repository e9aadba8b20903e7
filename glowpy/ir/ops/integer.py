"""Integer arithmetic that PyTorch exports put into shape computations: Mod, BitShift and the
Bitwise* ops, and the float tests IsNaN/IsInf. Elementwise ops: they fold when their inputs
are constants (the usual case, Graph.add) and have kernels (kernels/elementwise/integer.py)
otherwise."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir.ops.registry import Op, broadcast_shapes, register


def mod(a, b, fmod: int):
    """ONNX Mod: fmod=0 takes the divisor's sign (Python's %, numpy.mod, with its special
    cases for floats); fmod=1 the dividend's (C's fmod). An integer zero divisor gives 0, as
    the kernel does (C would trap)."""
    if a.dtype.kind == "f":
        with np.errstate(all="ignore"):
            return (np.fmod(a, b) if fmod else np.mod(a, b)).astype(a.dtype)
    with np.errstate(all="ignore"):
        safe = np.where(b == 0, 1, b).astype(a.dtype)
        r = np.fmod(a, safe) if fmod else np.mod(a, safe)
    return np.where(b == 0, 0, r).astype(a.dtype)


def _check_same(node):
    a, b = node.inputs
    if a.dtype != b.dtype:
        raise ModelError(f"node '{node.name}' ({node.op}): input types differ "
                         f"({a.dtype.name} and {b.dtype.name})")
    return a


@register
class Mod(Op):
    inputs = ("A", "B")
    attrs = {"fmod": 0}
    traits = frozenset({"elementwise"})
    since = 10

    def upgrade(self, op, attrs, inputs, opset, graph):
        attrs["_float_floor"] = opset >= 28  # as onnxruntime: floor-mod of floats from opset 28
        return attrs, inputs

    def infer(self, node):
        a = _check_same(node)
        if a.dtype.kind == "f" and not node.attrs["fmod"] and not node.attrs.get("_float_floor", 1):
            raise ModelError(f"node '{node.name}' (Mod): fmod=0 is defined for floats from opset "
                             f"28 on; give {a.dtype.name} inputs fmod=1 (or use opset 28)")
        return [(a.dtype, broadcast_shapes(node, a.shape, node.inputs[1].shape))]

    def reference(self, node, a, b):
        return [mod(a, b, node.attrs["fmod"])]


def shift(a, s, direction: str):
    """ONNX BitShift (opset 28: signed types too, the right shift arithmetic). A shift by a
    negative amount or by the bit width or more leaves only the sign fill: -1 for a right
    shift of a negative value, 0 otherwise (the kernel guards the shift C leaves undefined)."""
    bits = a.dtype.itemsize * 8
    big = (s < 0) | (s >= bits)
    s = np.where(big, 0, s).astype(a.dtype)
    if direction == "LEFT":
        r, fill = np.left_shift(a, s), np.zeros_like(a)
    else:
        r, fill = np.right_shift(a, s), np.where(a < 0, -1, 0).astype(a.dtype)
    return np.where(big, fill, r).astype(a.dtype)


@register
class BitShift(Op):
    inputs = ("X", "Y")
    attrs = {"direction": None}
    traits = frozenset({"elementwise"})
    since = 11

    def infer(self, node):
        a = _check_same(node)
        if node.attrs["direction"] not in ("LEFT", "RIGHT"):
            raise ModelError(f"node '{node.name}' (BitShift): direction must be LEFT or RIGHT, "
                             f"got '{node.attrs['direction']}'")
        return [(a.dtype, broadcast_shapes(node, a.shape, node.inputs[1].shape))]

    def reference(self, node, a, s):
        return [shift(a, s, node.attrs["direction"])]


BITWISE = {"BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or, "BitwiseXor": np.bitwise_xor}


class Bitwise(Op):
    inputs = ("A", "B")
    traits = frozenset({"elementwise"})
    since = 18

    def infer(self, node):
        a = _check_same(node)
        return [(a.dtype, broadcast_shapes(node, a.shape, node.inputs[1].shape))]

    def reference(self, node, a, b):
        return [BITWISE[node.op](a, b).astype(a.dtype)]


for _name in BITWISE:
    register(type(_name, (Bitwise,), {"names": (_name,)}))


@register
class BitwiseNot(Op):
    inputs = ("X",)
    traits = frozenset({"elementwise"})
    since = 18

    def infer(self, node):
        return [(node.inputs[0].dtype, node.inputs[0].shape)]

    def reference(self, node, x):
        return [np.invert(x)]


class FloatTest(Op):
    """IsNaN and IsInf: the bool masks nan_to_num-style exports compute."""
    inputs = ("X",)
    traits = frozenset({"elementwise"})

    def infer(self, node):
        return [(np.bool_, node.inputs[0].shape)]


@register
class IsNaN(FloatTest):
    since = 9

    def reference(self, node, x):
        return [np.isnan(x)]


@register
class IsInf(FloatTest):
    attrs = {"detect_negative": 1, "detect_positive": 1}
    since = 10

    def reference(self, node, x):
        a = node.attrs
        return [(np.isposinf(x) & bool(a["detect_positive"])) | (np.isneginf(x) & bool(a["detect_negative"]))]
