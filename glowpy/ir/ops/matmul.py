"""Matrix products: Gemm and MatMul (batched, numpy broadcasting)."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError, show
from glowpy.ir.ops.registry import Op, broadcast_shapes, register


@register
class Gemm(Op):
    inputs = ("A", "B", "C?")
    attrs = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0, "broadcast": 0}

    def dims(self, node):
        a, b = node.inputs[0], node.inputs[1]
        if len(a.shape) != 2 or len(b.shape) != 2:
            raise ModelError(f"node '{node.name}' (Gemm): A and B must be 2-D, got "
                             f"{list(a.shape)} and {list(b.shape)}")
        m, k = a.shape[::-1] if node.attrs["transA"] else a.shape
        k2, n = b.shape[::-1] if node.attrs["transB"] else b.shape
        if k != k2:
            raise ModelError(f"node '{node.name}' (Gemm): inner dimensions differ ({k} and {k2}) for "
                             f"A {list(a.shape)} and B {list(b.shape)}")
        return m, k, n

    def infer(self, node):
        m, k, n = self.dims(node)
        c = node.input(2)
        if c is not None:
            try:  # unidirectionally: C takes Y's shape, never the other way round
                ok = len(c.shape) <= 2 and np.broadcast_shapes(c.shape, (m, n)) == (m, n)
            except ValueError:
                ok = False
            if not ok:  # (a C of [4, 4, 1] reached the kernel: fuzz)
                raise ModelError(f"node '{show(node.name)}' (Gemm): C shape {list(c.shape)} does "
                                 f"not broadcast to [{m}, {n}]")
        return [(node.inputs[0].dtype, (m, n))]

    def reference(self, node, a, b, c=None):
        at = a.T if node.attrs["transA"] else a
        bt = b.T if node.attrs["transB"] else b
        y = np.float64(node.attrs["alpha"]) * (at.astype(np.float64) @ bt.astype(np.float64))
        if c is not None:
            y = y + np.float64(node.attrs["beta"]) * c
        return [y.astype(a.dtype)]


@register
class MatMul(Op):
    inputs = ("A", "B")

    def shapes(self, node):
        """(batch shape, m, k, n) with 1-D operands promoted as numpy does."""
        a, b = node.inputs[0].shape, node.inputs[1].shape
        if not a or not b:
            raise ModelError(f"node '{node.name}' (MatMul): operands must have rank >= 1")
        a2 = (1,) + a if len(a) == 1 else a
        b2 = b + (1,) if len(b) == 1 else b
        if a2[-1] != b2[-2]:
            raise ModelError(f"node '{node.name}' (MatMul): inner dimensions differ: "
                             f"{list(a)} x {list(b)}")
        batch = broadcast_shapes(node, a2[:-2], b2[:-2])
        return batch, a2[-2], a2[-1], b2[-1]

    def infer(self, node):
        batch, m, k, n = self.shapes(node)
        a, b = node.inputs[0].shape, node.inputs[1].shape
        out = batch + ((m,) if len(a) > 1 else ()) + ((n,) if len(b) > 1 else ())
        return [(node.inputs[0].dtype, out)]

    def reference(self, node, a, b):
        return [np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)]
