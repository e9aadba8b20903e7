"""Data-movement and shape ops: Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat, Split,
Slice, Gather, Shape, Constant.

Reshape, Flatten, Squeeze and Unsqueeze are views: lowering gives them no buffer and no copy."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError, show
from glowpy.ir.ops.registry import Op, ints, norm_axis, register
from glowpy.ir.validate import check_rank


class View(Op):
    traits = frozenset({"view"})

    def reference(self, node, x, *_):
        return [x.reshape(self.infer(node)[0][1])]


@register
class Reshape(View):
    inputs = ("data", "shape")
    attrs = {"allowzero": 0}
    const_inputs = (1,)

    def upgrade(self, op, attrs, inputs, opset, graph):
        if opset < 5:
            if "shape" not in attrs:
                raise ModelError(f"Reshape (opset {opset}): missing attribute 'shape' (the target "
                                 "shape; it became an input in opset 5)")
            inputs = [inputs[0], graph.constant(np.asarray(attrs.pop("shape"), np.int64), "shape")]
        return attrs, inputs

    def infer(self, node):
        x = node.inputs[0]
        target = ints(node.const_input(1, "shape"))
        out = []
        for i, d in enumerate(target):
            if d == 0 and not node.attrs["allowzero"]:
                if i >= len(x.shape):
                    raise ModelError(f"node '{node.name}' (Reshape): shape {target} copies dim {i} "
                                     f"that input {list(x.shape)} does not have")
                d = x.shape[i]
            out.append(d)
        if out.count(-1) > 1 or any(d < -1 for d in out):
            raise ModelError(f"node '{node.name}' (Reshape): invalid target shape {target}")
        if -1 in out:
            known = int(np.prod([d for d in out if d != -1]))
            if known == 0 or x.size % known:
                raise ModelError(f"node '{node.name}' (Reshape): cannot reshape {list(x.shape)} "
                                 f"({x.size} elements) to {target}")
            out[out.index(-1)] = x.size // known
        if int(np.prod(out)) != x.size:
            raise ModelError(f"node '{node.name}' (Reshape): cannot reshape {list(x.shape)} "
                             f"({x.size} elements) to {target}")
        return [(x.dtype, tuple(out))]


@register
class Flatten(View):
    inputs = ("input",)
    attrs = {"axis": 1}

    def infer(self, node):
        x = node.inputs[0]
        r = len(x.shape)
        a = node.attrs["axis"]
        a = a + r if a < 0 else a
        if not 0 <= a <= r:
            raise ModelError(f"node '{node.name}' (Flatten): axis {node.attrs['axis']} out of range")
        return [(x.dtype, (int(np.prod(x.shape[:a])), int(np.prod(x.shape[a:]))))]


class AxesOp(Op):
    """Ops whose axes moved from an attribute to an input at opset 13 (18 for reductions)."""
    axes_input_since = 13

    def upgrade(self, op, attrs, inputs, opset, graph):
        if opset < self.axes_input_since and attrs.get("axes") is not None:
            inputs = [inputs[0], graph.constant(np.asarray(attrs["axes"], np.int64), "axes")]
        attrs.pop("axes", None)
        return attrs, inputs

    def axes(self, node, rank):
        a = node.const_input(1, "axes")
        return None if a is None else sorted({norm_axis(x, rank, node) for x in ints(a)})


@register
class Squeeze(AxesOp, View):
    inputs = ("data", "axes?")
    const_inputs = (1,)

    def infer(self, node):
        x = node.inputs[0]
        axes = self.axes(node, len(x.shape))
        if axes is None:
            axes = [i for i, d in enumerate(x.shape) if d == 1]
        for a in axes:
            if x.shape[a] != 1:
                raise ModelError(f"node '{node.name}' (Squeeze): dim {a} of {list(x.shape)} is not 1")
        return [(x.dtype, tuple(d for i, d in enumerate(x.shape) if i not in axes))]


@register
class Unsqueeze(AxesOp, View):
    inputs = ("data", "axes")
    const_inputs = (1,)

    def infer(self, node):
        x = node.inputs[0]
        r = len(x.shape) + len(ints(node.const_input(1, "axes")))
        check_rank(r, f"node '{show(node.name)}' (Unsqueeze): output 0")  # before O(r^2) work
        axes = self.axes(node, r)
        if len(axes) != r - len(x.shape):
            raise ModelError(f"node '{node.name}' (Unsqueeze): axes "
                             f"{ints(node.const_input(1))} repeat an axis")
        it = iter(x.shape)
        return [(x.dtype, tuple(1 if i in axes else next(it) for i in range(r)))]


@register
class Transpose(Op):
    inputs = ("data",)
    attrs = {"perm": None}

    def perm(self, node):
        r = len(node.inputs[0].shape)
        p = node.attrs["perm"]
        p = list(range(r))[::-1] if p is None else [norm_axis(a, r, node) for a in p]
        if sorted(p) != list(range(r)):
            raise ModelError(f"node '{node.name}' (Transpose): perm {node.attrs['perm']} is not a "
                             f"permutation of {r} axes")
        return p

    def infer(self, node):
        x = node.inputs[0]
        return [(x.dtype, tuple(x.shape[p] for p in self.perm(node)))]

    def reference(self, node, x):
        return [np.asarray(np.transpose(x, self.perm(node)), order="C")]


@register
class Concat(Op):
    inputs = ("inputs*",)
    attrs = {"axis": None}

    def infer(self, node):
        xs = [v for v in node.inputs if v is not None]
        r = len(xs[0].shape)
        ax = norm_axis(node.attrs["axis"] if node.attrs["axis"] is not None else 1, r, node)
        for v in xs:
            if len(v.shape) != r or any(a != b for i, (a, b) in enumerate(zip(v.shape, xs[0].shape))
                                        if i != ax):
                raise ModelError(f"node '{node.name}' (Concat): input shapes "
                                 f"{[list(v.shape) for v in xs]} differ outside axis {ax}")
        node.attrs["axis"] = ax
        shape = list(xs[0].shape)
        shape[ax] = sum(v.shape[ax] for v in xs)
        return [(xs[0].dtype, tuple(shape))]

    def reference(self, node, *xs):
        return [np.concatenate([x for x in xs if x is not None], axis=node.attrs["axis"])]


@register
class Split(Op):
    inputs = ("input", "split?")
    attrs = {"axis": 0, "num_outputs": None}
    const_inputs = (1,)

    def upgrade(self, op, attrs, inputs, opset, graph):
        if opset < 13 and attrs.get("split") is not None:
            inputs = [inputs[0], graph.constant(np.asarray(attrs["split"], np.int64), "split")]
        attrs.pop("split", None)
        return attrs, inputs

    def sizes(self, node):
        x = node.inputs[0]
        if not x.shape:
            raise ModelError(f"node '{node.name}' (Split): input '{x.name}' is a scalar; Split "
                             "needs rank >= 1")
        ax = norm_axis(node.attrs["axis"], len(x.shape), node)
        split = node.const_input(1, "split")
        n = node._num_outputs or node.attrs["num_outputs"] or len(node.outputs) or 1
        if split is not None:
            sizes = ints(split)
        else:
            chunk = -(-x.shape[ax] // n)
            sizes = [min(chunk, x.shape[ax] - i * chunk) for i in range(n)]
        if sum(sizes) != x.shape[ax] or min(sizes) < 0:
            raise ModelError(f"node '{node.name}' (Split): sizes {sizes} do not add up to dim {ax} "
                             f"({x.shape[ax]}) of {list(x.shape)}")
        return ax, sizes

    def infer(self, node):
        x = node.inputs[0]
        ax, sizes = self.sizes(node)
        return [(x.dtype, x.shape[:ax] + (s,) + x.shape[ax + 1:]) for s in sizes]

    def reference(self, node, x, split=None):
        ax, sizes = self.sizes(node)
        return list(np.split(x, np.cumsum(sizes)[:-1], axis=ax))


@register
class Slice(Op):
    inputs = ("data", "starts", "ends", "axes?", "steps?")
    const_inputs = (1, 2, 3, 4)

    def upgrade(self, op, attrs, inputs, opset, graph):
        if opset < 10:
            c = [graph.constant(np.asarray(attrs.pop(k), np.int64), k)
                 for k in ("starts", "ends")]
            axes = attrs.pop("axes", None)
            inputs = [inputs[0]] + c + ([graph.constant(np.asarray(axes, np.int64), "axes")]
                                        if axes is not None else [])
        return attrs, inputs

    def region(self, node):
        """Per dim (start, step, count) selecting the slice."""
        x = node.inputs[0]
        r = len(x.shape)
        starts, ends = ints(node.const_input(1, "starts")), ints(node.const_input(2, "ends"))
        axes = node.const_input(3, "axes")
        axes = list(range(len(starts))) if axes is None else [norm_axis(a, r, node) for a in ints(axes)]
        steps = node.const_input(4, "steps")
        steps = [1] * len(starts) if steps is None else ints(steps)
        if not len(starts) == len(ends) == len(axes) == len(steps):
            raise ModelError(f"node '{node.name}' (Slice): starts, ends, axes and steps differ in length")
        out = [(0, 1, d) for d in x.shape]
        for s, e, a, st in zip(starts, ends, axes, steps):
            if st == 0:
                raise ModelError(f"node '{node.name}' (Slice): step 0 on axis {a}")
            idx = range(*slice(s, e, st).indices(x.shape[a]))
            out[a] = (idx.start, st, len(idx))
        return out

    def infer(self, node):
        x = node.inputs[0]
        return [(x.dtype, tuple(c for _, _, c in self.region(node)))]

    def reference(self, node, x, *_):
        sl = tuple(slice(s, s + st * c if s + st * c >= 0 else None, st) if c else slice(0, 0)
                   for s, st, c in self.region(node))
        return [np.ascontiguousarray(x[sl])]


@register
class Gather(Op):
    inputs = ("data", "indices")
    attrs = {"axis": 0}

    def infer(self, node):
        x, idx = node.inputs
        ax = norm_axis(node.attrs["axis"], len(x.shape), node)
        if idx.is_const:
            bad = (idx.const < -x.shape[ax]) | (idx.const >= x.shape[ax])
            if bad.any():
                raise ModelError(f"node '{node.name}' (Gather): index {int(idx.const[bad].flat[0])} "
                                 f"out of range for dim {ax} of size {x.shape[ax]}")
        return [(x.dtype, x.shape[:ax] + idx.shape + x.shape[ax + 1:])]

    def reference(self, node, x, idx):
        ax = norm_axis(node.attrs["axis"], x.ndim, node)
        return [np.take(x, idx.astype(np.int64), axis=ax)]


@register
class Shape(Op):
    inputs = ("data",)
    attrs = {"start": 0, "end": None}

    def infer(self, node):
        r = len(node.inputs[0].shape)
        return [(np.int64, (len(range(r)[slice(node.attrs["start"], node.attrs["end"])]),))]

    def reference(self, node, x):
        return [np.asarray(x.shape, np.int64)[node.attrs["start"]:node.attrs["end"]]]

    def try_fold(self, node, types):  # shapes are static, so Shape is always a constant
        return [np.asarray(node.inputs[0].shape, np.int64)[node.attrs["start"]:node.attrs["end"]]]


@register
class Constant(Op):
    """The loader turns the attribute (value, value_float, value_ints, ...) into `value`."""
    attrs = {"value": None}

    def infer(self, node):
        v = np.asarray(node.attrs["value"])
        return [(v.dtype, v.shape)]

    def reference(self, node):
        return [np.asarray(node.attrs["value"])]
