"""Comparisons, boolean logic and Where: Equal, Less, LessOrEqual, Greater, GreaterOrEqual,
Not, And, Or, Xor, Where. All broadcast as numpy does; comparisons and logic produce bool
(stored as one byte, 0 or 1)."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir.ops.registry import Op, broadcast_shapes, register

COMPARE = {"Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal,
           "Greater": np.greater, "GreaterOrEqual": np.greater_equal}
LOGIC = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}
SINCE = {"Equal": 1, "Less": 1, "Greater": 1, "LessOrEqual": 12, "GreaterOrEqual": 12,
         "And": 1, "Or": 1, "Xor": 1, "Not": 1, "Where": 9}


def _same_types(node, values, what="input types"):
    dts = {v.dtype for v in values}
    if len(dts) != 1:
        raise ModelError(f"node '{node.name}' ({node.op}): {what} differ "
                         f"({' and '.join(sorted(d.name for d in dts))})")
    return dts.pop()


class Compare(Op):
    inputs = ("A", "B")
    traits = frozenset({"elementwise"})

    def infer(self, node):
        a, b = node.inputs
        _same_types(node, (a, b))
        return [(np.bool_, broadcast_shapes(node, a.shape, b.shape))]

    def reference(self, node, a, b):
        return [COMPARE[node.op](a, b)]


for _name in COMPARE:
    register(type(_name, (Compare,), {"names": (_name,), "since": SINCE[_name]}))


class Logic(Op):
    inputs = ("A", "B")
    traits = frozenset({"elementwise"})

    def infer(self, node):
        a, b = node.inputs
        for v in (a, b):
            if v.dtype != np.bool_:
                raise ModelError(f"node '{node.name}' ({node.op}): input '{v.name}' is "
                                 f"{v.dtype.name}; {node.op} takes bool tensors")
        return [(np.bool_, broadcast_shapes(node, a.shape, b.shape))]

    def reference(self, node, a, b):
        return [LOGIC[node.op](a, b)]


for _name in LOGIC:
    register(type(_name, (Logic,), {"names": (_name,), "since": SINCE[_name]}))


@register
class Not(Op):
    inputs = ("X",)
    traits = frozenset({"elementwise"})

    def infer(self, node):
        x = node.inputs[0]
        if x.dtype != np.bool_:
            raise ModelError(f"node '{node.name}' (Not): input '{x.name}' is {x.dtype.name}; "
                             "Not takes a bool tensor")
        return [(np.bool_, x.shape)]

    def reference(self, node, x):
        return [np.logical_not(x)]


@register
class Where(Op):
    inputs = ("condition", "X", "Y")
    traits = frozenset({"elementwise"})
    since = 9

    def infer(self, node):
        c, x, y = node.inputs
        if c.dtype != np.bool_:
            raise ModelError(f"node '{node.name}' (Where): condition '{c.name}' is {c.dtype.name}, "
                             "not bool")
        dt = _same_types(node, (x, y), "X and Y types")
        return [(dt, broadcast_shapes(node, c.shape, x.shape, y.shape))]

    def reference(self, node, c, x, y):
        return [np.where(c, x, y)]
