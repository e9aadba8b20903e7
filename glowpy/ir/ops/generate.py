"""Ops that make a tensor from compile-time operands: ConstantOfShape, Range.

Their operands determine the output shape, so they must be constants; the graph builder then
folds the node into a constant (no kernel is ever needed)."""
from __future__ import annotations

import math

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir.ops.registry import Op, ints, register


@register
class ConstantOfShape(Op):
    inputs = ("input",)
    attrs = {"value": None}
    const_inputs = (0,)
    since = 9

    def fill(self, node) -> np.ndarray:
        v = node.attrs["value"]
        v = np.zeros(1, np.float32) if v is None else np.asarray(v)
        if v.size != 1:
            raise ModelError(f"node '{node.name}' (ConstantOfShape): value must hold one element, "
                             f"got shape {list(v.shape)}")
        return v.reshape(())

    def infer(self, node):
        shape = ints(node.const_input(0, "shape"))
        if any(d < 0 for d in shape):
            raise ModelError(f"node '{node.name}' (ConstantOfShape): negative dimension in {shape}")
        return [(self.fill(node).dtype, tuple(shape))]

    def reference(self, node, shape):
        return [np.full(tuple(ints(shape)), self.fill(node))]


@register
class Range(Op):
    inputs = ("start", "limit", "delta")
    attrs = {"stash_type": 1}  # opset 27: float precision of the computation; float32 here
    const_inputs = (0, 1, 2)
    since = 11

    def operands(self, node):
        vals = [node.const_input(i, n) for i, n in enumerate(("start", "limit", "delta"))]
        if any(v.size != 1 for v in vals):
            raise ModelError(f"node '{node.name}' (Range): start, limit and delta must be scalars")
        if len({v.dtype for v in vals}) != 1:
            raise ModelError(f"node '{node.name}' (Range): start, limit and delta types differ")
        start, limit, delta = (v.reshape(()) for v in vals)
        if start.dtype.kind == "f" and not all(np.isfinite(v) for v in (start, limit, delta)):
            raise ModelError(f"node '{node.name}' (Range): start {start}, limit {limit} and delta "
                             f"{delta} must be finite numbers")
        if delta == 0:
            raise ModelError(f"node '{node.name}' (Range): delta is 0")
        return start, limit, delta

    def infer(self, node):
        start, limit, delta = self.operands(node)
        n = max(int(math.ceil((float(limit) - float(start)) / float(delta))), 0)
        return [(start.dtype, (n,))]

    def reference(self, node, *_):
        start, limit, delta = self.operands(node)
        n = self.infer(node)[0][1][0]
        # ONNX defines element i as start + i * delta, accumulated in the input type
        return [(start + np.arange(n, dtype=start.dtype) * delta).astype(start.dtype)]
