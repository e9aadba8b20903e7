"""Index-driven ops of shape arithmetic and masks: GatherElements, GatherND, ScatterElements,
ScatterND, MaxUnpool, Trilu, OneHot, plus Size, EyeLike and NonZero (always folded). Each folds when its
inputs are constants (Graph.add); the others have kernels (kernels/tensor/scatter.py) that read
their indices at run time, so indices need not be constants. Out-of-range indices known at
compile time are refused here; at run time a gather reads 0 and a scatter skips the element."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir.ops.registry import Op, ints, norm_axis, register

REDUCTIONS = ("none", "add", "mul", "max", "min")
_UFUNC = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _err(node, msg):
    return ModelError(f"node '{node.name}' ({node.op}): {msg}")


def _check_range(node, c, size):
    """Refuses constant indices (c: an array, None when known only at run time) outside -size..size-1."""
    if c is not None and c.size:
        bad = (c < -size) | (c >= size)
        if bad.any():
            raise _err(node, f"index {int(c[bad].flat[0])} is out of range for a dimension of size {size}")


def _reduction(node):
    r = node.attrs.get("reduction", "none")
    if r not in REDUCTIONS:
        raise _err(node, f"reduction '{r}' is not one of {', '.join(REDUCTIONS)}")
    return r


@register
class GatherElements(Op):
    inputs = ("data", "indices")
    attrs = {"axis": 0}
    since = 11

    def infer(self, node):
        x, idx = node.inputs
        ax = norm_axis(node.attrs["axis"], len(x.shape), node)
        if len(idx.shape) != len(x.shape):
            raise _err(node, f"indices of rank {len(idx.shape)} for data of rank {len(x.shape)}")
        _check_range(node, idx.const, x.shape[ax])
        return [(x.dtype, idx.shape)]

    def reference(self, node, x, idx):
        ax = norm_axis(node.attrs["axis"], x.ndim, node)
        i = np.where(idx < 0, idx + x.shape[ax], idx).astype(np.int64)
        return [np.take_along_axis(x, i, axis=ax)]


def _nd_layout(node, x, idx, b):
    """(k, output shape) of GatherND/ScatterND: index tuples of length k address x's dims
    b..b+k-1."""
    if not idx.shape:
        raise _err(node, "indices must have rank 1 or more")
    k = idx.shape[-1]
    if b < 0 or (b > 0 and b >= min(len(x.shape), len(idx.shape))):
        raise _err(node, f"batch_dims={b} is out of range")
    if x.shape[:b] != idx.shape[:b]:
        raise _err(node, f"the batch dims of data {list(x.shape)} and indices {list(idx.shape)} differ")
    if not 1 <= k <= len(x.shape) - b:
        raise _err(node, f"index tuples of length {k} for data of rank {len(x.shape)}")
    if idx.is_const:
        for j in range(k):
            _check_range(node, idx.const[..., j], x.shape[b + j])
    return k, idx.shape[:-1] + x.shape[b + k:]


@register
class GatherND(Op):
    inputs = ("data", "indices")
    attrs = {"batch_dims": 0}
    since = 11

    def infer(self, node):
        x, idx = node.inputs
        return [(x.dtype, _nd_layout(node, x, idx, node.attrs["batch_dims"])[1])]

    def reference(self, node, x, idx):
        b = node.attrs["batch_dims"]
        k = idx.shape[-1]
        idx = np.where(idx < 0, idx + np.array(x.shape[b:b + k]), idx).astype(np.int64)
        bx = x.reshape((-1,) + x.shape[b:])
        bi = idx.reshape((bx.shape[0], -1, k))
        out = np.stack([bx[n][tuple(bi[n].T)] for n in range(bx.shape[0])])
        return [out.reshape(idx.shape[:-1] + x.shape[b + k:])]


@register
class ScatterElements(Op):
    inputs = ("data", "indices", "updates")
    attrs = {"axis": 0, "reduction": "none"}
    names = ("ScatterElements", "Scatter")
    since = 9

    def infer(self, node):
        x, idx, upd = node.inputs
        ax = norm_axis(node.attrs["axis"], len(x.shape), node)
        _reduction(node)
        if idx.shape != upd.shape or len(idx.shape) != len(x.shape):
            raise _err(node, f"indices {list(idx.shape)} and updates {list(upd.shape)} must have "
                             f"one shape, of data's rank {len(x.shape)}")
        _check_range(node, idx.const, x.shape[ax])
        return [(x.dtype, x.shape)]

    def reference(self, node, x, idx, upd):
        ax = norm_axis(node.attrs["axis"], x.ndim, node)
        out = x.copy()
        i = np.where(idx < 0, idx + x.shape[ax], idx).astype(np.int64)
        red = _reduction(node)
        for pos in np.ndindex(*idx.shape):
            dst = list(pos)
            dst[ax] = i[pos]
            dst = tuple(dst)
            out[dst] = upd[pos] if red == "none" else _UFUNC[red](out[dst], upd[pos])
        return [out]


@register
class ScatterND(Op):
    inputs = ("data", "indices", "updates")
    attrs = {"reduction": "none"}
    since = 11

    def infer(self, node):
        x, idx, upd = node.inputs
        _reduction(node)
        k, want = _nd_layout(node, x, idx, 0)
        if upd.shape != want:
            raise _err(node, f"updates have shape {list(upd.shape)}; indices {list(idx.shape)} "
                             f"into data {list(x.shape)} need {list(want)}")
        return [(x.dtype, x.shape)]

    def reference(self, node, x, idx, upd):
        out = x.copy()
        k = idx.shape[-1]
        i = np.where(idx < 0, idx + np.array(x.shape[:k]), idx).astype(np.int64)
        red = _reduction(node)
        for pos in np.ndindex(*idx.shape[:-1]):
            dst = tuple(i[pos])
            out[dst] = upd[pos] if red == "none" else _UFUNC[red](out[dst], upd[pos])
        return [out]


@register
class MaxUnpool(Op):
    """MaxPool's inverse (SegNet, ENet decoders): a zero tensor of the output shape with X's
    values at I's positions, I indexing the whole output flattened (what MaxPool's Indices
    output holds)."""
    inputs = ("X", "I", "output_shape?")
    attrs = {"kernel_shape": None, "pads": None, "strides": None}
    const_inputs = (2,)
    since = 9

    def out_shape(self, node) -> tuple:
        x = node.inputs[0]
        n = len(x.shape) - 2
        a = node.attrs
        kernel = [int(k) for k in a["kernel_shape"] or []]
        strides = [int(v) for v in a["strides"] or [1] * n]
        pads = [int(v) for v in a["pads"] or [0] * 2 * n]
        if n < 1 or len(kernel) != n or len(strides) != n or len(pads) != 2 * n:
            raise _err(node, f"kernel_shape {kernel}, strides {strides} and pads {pads} for an "
                             f"input of rank {len(x.shape)} (kernel_shape is required)")
        if min(kernel + strides) < 1 or min(pads) < 0:
            raise _err(node, f"kernel_shape {kernel} and strides {strides} must be positive, "
                             f"pads {pads} not negative")
        shape = node.input(2)
        if shape is not None:
            want = tuple(int(v) for v in np.asarray(node.const_input(2, "output_shape")).reshape(-1))
            if len(want) != len(x.shape) or want[:2] != x.shape[:2] or min(want) < 1:
                raise _err(node, f"output_shape {list(want)} for an input of shape {list(x.shape)}")
            return want
        out = tuple((d - 1) * s - p0 - p1 + k for d, s, p0, p1, k in
                    zip(x.shape[2:], strides, pads[:n], pads[n:], kernel))
        if min(out) < 1:
            raise _err(node, f"kernel_shape {kernel}, strides {strides} and pads {pads} leave "
                             f"an empty output for an input of shape {list(x.shape)}")
        return x.shape[:2] + out

    def infer(self, node):
        x, idx = node.inputs[:2]
        if idx.shape != x.shape or idx.dtype != np.int64:
            raise _err(node, f"I is {idx.dtype.name}{list(idx.shape)}; it must be int64 of X's "
                             f"shape {list(x.shape)}")
        shape = self.out_shape(node)
        _check_range(node, idx.const, int(np.prod(shape, dtype=np.int64)))
        return [(x.dtype, shape)]

    def reference(self, node, x, idx, shape=None):
        out = self.out_shape(node)
        y = np.zeros(int(np.prod(out, dtype=np.int64)), x.dtype)
        i = idx.reshape(-1).astype(np.int64)
        i = np.where(i < 0, i + y.size, i)
        keep = (i >= 0) & (i < y.size)
        y[i[keep]] = x.reshape(-1)[keep]
        return [y.reshape(out)]


@register
class Trilu(Op):
    inputs = ("input", "k?")
    attrs = {"upper": 1}
    const_inputs = (1,)
    since = 14

    def diagonal(self, node) -> int:
        k = node.const_input(1, "k")
        return 0 if k is None else ints(k)[0]

    def infer(self, node):
        x = node.inputs[0]
        if len(x.shape) < 2:
            raise _err(node, f"input of rank {len(x.shape)}; Trilu needs rank 2 or more")
        self.diagonal(node)
        return [(x.dtype, x.shape)]

    def reference(self, node, x, k=None):
        d = self.diagonal(node)
        return [np.triu(x, d) if node.attrs["upper"] else np.tril(x, d)]


@register
class Size(Op):
    inputs = ("data",)

    def infer(self, node):
        return [(np.int64, ())]

    def reference(self, node, x):
        return [np.array(x.size, np.int64)]

    def try_fold(self, node, types):  # shapes are static, so Size is always a constant
        return [np.array(node.inputs[0].size, np.int64)]


@register
class NonZero(Op):
    """Its output's size is the number of nonzero elements: known only for a constant input
    (a mask built from static shapes); otherwise the op is data-dependent."""
    inputs = ("X",)
    since = 9

    def infer(self, node):
        x = node.inputs[0]
        if not x.is_const:
            raise _err(node, f"its output size depends on the values of '{x.name}' (data-dependent); "
                             f"compile the model up to its inputs with -model-outputs={x.name}")
        return [(np.int64, (max(x.const.ndim, 1), int(np.count_nonzero(x.const))))]

    def reference(self, node, x):
        if x.ndim == 0:
            return [np.zeros((1, int(x != 0)), np.int64)]
        return [np.array(np.nonzero(x), np.int64).reshape(x.ndim, -1)]


@register
class OneHot(Op):
    inputs = ("indices", "depth", "values")
    attrs = {"axis": -1}
    const_inputs = (1,)  # the depth is the size of the new axis
    since = 9

    def layout(self, node):
        """(depth, axis of the new dimension in the output)."""
        idx = node.inputs[0]
        depth = float(np.asarray(node.const_input(1, "depth")).reshape(-1)[0])
        if not 1 <= depth <= 2 ** 31:
            raise _err(node, f"depth {depth} must be a positive size")
        ax = node.attrs["axis"]
        r = len(idx.shape) + 1
        if not -r <= ax < r:
            raise _err(node, f"axis {ax} is out of range for an output of rank {r}")
        return int(depth), ax % r

    def infer(self, node):
        idx, _, values = node.inputs
        if values.size != 2:
            raise _err(node, f"values must hold [off, on], got shape {list(values.shape)}")
        depth, ax = self.layout(node)
        return [(values.dtype, idx.shape[:ax] + (depth,) + idx.shape[ax:])]

    def reference(self, node, idx, _depth, values):
        depth, ax = self.layout(node)
        i = idx.astype(np.int64)
        i = np.where(i < 0, i + depth, i)
        hot = np.expand_dims(i, ax) == np.arange(depth).reshape((-1,) + (1,) * (idx.ndim - ax))
        v = values.reshape(-1)
        return [np.where(hot, v[1], v[0]).astype(values.dtype)]


@register
class EyeLike(Op):
    """Depends on its input's shape only, so it is always a constant."""
    inputs = ("input",)
    attrs = {"dtype": None, "k": 0}
    since = 9

    def upgrade(self, op, attrs, inputs, opset, graph):
        from glowpy.ir.dtypes import typed_attr
        return typed_attr(attrs, "dtype", op), inputs

    def infer(self, node):
        x = node.inputs[0]
        if len(x.shape) != 2:
            raise _err(node, f"input of rank {len(x.shape)}; EyeLike needs rank 2")
        return [(node.attrs["dtype"] or x.dtype, x.shape)]

    def reference(self, node, x=None):
        rows, cols = node.inputs[0].shape
        return [np.eye(rows, cols, node.attrs["k"], dtype=node.attrs["dtype"] or node.inputs[0].dtype)]

    def try_fold(self, node, types):
        return self.reference(node)
