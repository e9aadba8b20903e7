"""Ops that scan one axis: ArgMax, ArgMin, TopK, CumSum, CumProd.

Each views its input as [outer, axis, inner] (`axis_layout`); the numpy references and the
kernels share that view."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir.ops.registry import Op, ints, norm_axis, register


def axis_layout(shape, axis: int) -> tuple[int, int, int]:
    return int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1:]))


class ArgReduce(Op):
    inputs = ("data",)
    attrs = {"axis": 0, "keepdims": 1, "select_last_index": 0}

    def axis(self, node) -> int:
        return norm_axis(node.attrs["axis"], len(node.inputs[0].shape), node)

    def infer(self, node):
        x = node.inputs[0]
        ax = self.axis(node)
        if x.shape[ax] == 0:
            raise ModelError(f"node '{node.name}' ({node.op}): axis {ax} of {list(x.shape)} is empty")
        shape = tuple(1 if i == ax else d for i, d in enumerate(x.shape)
                      if node.attrs["keepdims"] or i != ax)
        return [(np.int64, shape)]

    def reference(self, node, x):
        ax = self.axis(node)
        fn = np.argmax if node.op == "ArgMax" else np.argmin
        if node.attrs["select_last_index"]:
            y = x.shape[ax] - 1 - fn(np.flip(x, ax), axis=ax)
        else:
            y = fn(x, axis=ax)
        if node.attrs["keepdims"]:
            y = np.expand_dims(y, ax)
        return [np.asarray(y, np.int64)]


@register
class ArgMax(ArgReduce):
    pass


@register
class ArgMin(ArgReduce):
    pass


@register
class TopK(Op):
    """The k largest (or smallest) along `axis`, sorted, ties broken by the lower index. Before
    opset 10, k is an attribute."""
    inputs = ("X", "K")
    attrs = {"axis": -1, "largest": 1, "sorted": 1}
    num_outputs = 2
    const_inputs = (1,)

    def upgrade(self, op, attrs, inputs, opset, graph):
        if opset < 10:
            inputs = [inputs[0], graph.constant(np.asarray([attrs.pop("k")], np.int64), "k")]
        return attrs, inputs

    def params(self, node) -> tuple[int, int]:
        x = node.inputs[0]
        ax = norm_axis(node.attrs["axis"], len(x.shape), node)
        k = ints(node.const_input(1, "K"))
        if len(k) != 1 or not 0 <= k[0] <= x.shape[ax]:
            raise ModelError(f"node '{node.name}' (TopK): K={k} must be one value in "
                             f"0..{x.shape[ax]} (dim {ax} of {list(x.shape)})")
        return ax, k[0]

    def infer(self, node):
        x = node.inputs[0]
        ax, k = self.params(node)
        shape = x.shape[:ax] + (k,) + x.shape[ax + 1:]
        return [(x.dtype, shape), (np.int64, shape)]

    def reference(self, node, x, _k=None):
        ax, k = self.params(node)
        key = -x if node.attrs["largest"] else x
        if x.dtype == np.bool_ or x.dtype.kind == "u":
            key = -x.astype(np.int64) if node.attrs["largest"] else x
        idx = np.argsort(key, axis=ax, kind="stable").take(np.arange(k), axis=ax)
        return [np.take_along_axis(x, idx, ax), idx.astype(np.int64)]


@register
class CumSum(Op):
    inputs = ("x", "axis")
    attrs = {"exclusive": 0, "reverse": 0}
    const_inputs = (1,)
    since = 11

    def axis(self, node) -> int:
        a = ints(node.const_input(1, "axis"))
        if len(a) != 1:
            raise ModelError(f"node '{node.name}' ({node.op}): axis must be one value, got {a}")
        return norm_axis(a[0], len(node.inputs[0].shape), node)

    def infer(self, node):
        x = node.inputs[0]
        self.axis(node)
        if x.dtype == np.bool_:
            raise ModelError(f"node '{node.name}' ({node.op}): bool input is not supported")
        return [(x.dtype, x.shape)]

    def reference(self, node, x, _axis=None):
        ax = self.axis(node)
        y = np.flip(x, ax) if node.attrs["reverse"] else x
        acc = np.float64 if x.dtype.kind == "f" else x.dtype
        if node.op == "CumProd":  # exclusive: shifted by one, 1 first (no division by 0)
            s = np.cumprod(y, axis=ax, dtype=acc)
            if node.attrs["exclusive"]:
                first = np.ones_like(np.take(s, [0], axis=ax))
                s = np.concatenate([first, np.take(s, np.arange(s.shape[ax] - 1), axis=ax)],
                                   axis=ax)
        else:
            s = np.cumsum(y, axis=ax, dtype=acc)
            if node.attrs["exclusive"]:
                s = s - y
        if node.attrs["reverse"]:
            s = np.flip(s, ax)
        return [np.ascontiguousarray(s).astype(x.dtype)]


@register
class CumProd(CumSum):
    """Running products along an axis (opset 26): CumSum's form, multiplying from 1."""
    since = 26
